"""Ports for tests that start TensorFlow servers themselves (without adrun's launcher).

Why not the kernel's choice (bind port 0, then release): under pytest-xdist a test on another
worker could be handed the same port between the release here and the servers' bind seconds
later. So each pytest process takes its ports from a block of its own, below the kernel's
ephemeral range (Linux: 32768 and up, where every bind to port 0 and every outgoing connection,
adrun's launcher's included, gets its port): xdist worker gwN of M the N-th of M blocks, a run
without xdist the whole range. A cursor moves through the block, so a port a test released is not
handed out again soon, and each port is checked free when chosen (a program outside the suite may
hold it). The suite's fixed ports (23000 and up: base_port tests) lie above every block.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator

FIRST, END = 10000, 22000  # the blocks share [FIRST, END)


def worker_block(worker: str | None, workers: int) -> range:
    """The ports of xdist worker `worker` ("gw3", PYTEST_XDIST_WORKER) of `workers`; without xdist
    (`worker` None) all of them."""
    if worker is None:
        return range(FIRST, END)
    index = int(worker.removeprefix("gw"))
    size = (END - FIRST) // workers
    return range(FIRST + index * size, FIRST + (index + 1) * size)


_BLOCK = worker_block(os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
_CURSOR: Iterator[int] = itertools.cycle(_BLOCK)


def free_ports(count: int) -> list[int]:
    """`count` distinct ports of this process's block, free at the time of the call: all held
    open together while choosing, then released for the test's servers to bind."""
    held: list[socket.socket] = []
    try:
        for _ in range(len(_BLOCK)):
            if len(held) == count:
                break
            sock = socket.socket()
            try:
                sock.bind(("", next(_CURSOR)))  # every address, as TF's servers bind
            except OSError:  # taken: try the next one
                sock.close()
                continue
            held.append(sock)
        if len(held) < count:
            raise RuntimeError(f"fewer than {count} free ports in {_BLOCK}")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()
