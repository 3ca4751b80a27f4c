"""A receiving probe's accepted connection as the kernel keeps it with SO_TIMESTAMPNS, for tests of
how the probe keeps a stream's arrivals (launch/nodes/probe.py `_stream`) without a network."""

from __future__ import annotations

import socket
import struct

from adrun.launch.nodes import probe


class TimedConnection:
    """A receiver's accepted connection as the kernel keeps it with SO_TIMESTAMPNS: `batches` of
    packets [arrival time, bytes], each batch what came before one read, which takes at most its
    size of it and is timed as the last packet it took arrived (recvmsg's ancillary data)."""

    def __init__(self, batches: list[list[tuple[float, int]]]) -> None:
        self.batches = [list(batch) for batch in batches]

    def setsockopt(self, level: int, option: int, value: int) -> None:
        pass

    def settimeout(self, timeout: float) -> None:
        pass

    def recvmsg(self, size: int, ancillary_size: int) -> tuple[bytes, list, int, None]:
        if not self.batches:
            return b"", [], 0, None
        batch, taken, at = self.batches[0], 0, 0.0
        while batch and taken < size:
            at, nbytes = batch[0]
            took = min(nbytes, size - taken)
            taken += took
            if took < nbytes:
                batch[0] = (at, nbytes - took)
            else:
                batch.pop(0)
        if not batch:
            self.batches.pop(0)
        stamp = struct.pack("qq", int(at), round((at - int(at)) * 1e9))
        return b"\0" * taken, [(socket.SOL_SOCKET, probe.SO_TIMESTAMPNS, stamp)], 0, None
