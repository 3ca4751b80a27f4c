"""Running `probe.py` on a node, and one bounded TCP transfer between two nodes with it.

`cluster check` measures each node pair's bandwidth this way; the network facts (`network_facts.py`)
measure every path's bandwidth and latency, and between nodes its token bucket and sender queue
(`shape`: link_shape.py), with the same probe programs kept running for the whole measurement
(standing_probes.py), whose results read the same (`sent_transfer`). Both run the probe as the
node's tasks would run (`command.node_command`: its interpreter, env and `ssh.activate`), through a
NodeShell.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from adrun.spec import Node

from . import link_shape, probe
from .command import node_command, shipped_source
from .shell import NodeShell

PROBE_SOURCE = shipped_source(probe)
TRANSFER_TIMEOUT = 20.0
CONNECT_TIMEOUT = 5.0  # the receiver starts in a fresh Python: ~0.1 s, more on a busy node
_BIND_ATTEMPTS = 3
MIN_WINDOWS = 8  # windows between a stream's successive arrivals (steady_rate); fewer: the arrivals' span
# steady_rate's pauses: windows slower than the median one by more than PAUSE, and those slower by
# more than SLOW next to none that is too but by no more than PAUSE (a varying rate is slow for a while)
SLOW, PAUSE = 1.5, 3.0


def probe_command(node: Node, mode: str, args: Mapping[str, Any], *, local: bool) -> str:
    """The shell command running the probe in `mode` on `node` (this machine when `local`)."""
    return node_command(node, PROBE_SOURCE, mode, args, local=local)


def parse_probe(stdout: str) -> dict[str, Any] | None:
    """The probe's result line, or None when it printed none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(probe.MARKER):
            return json.loads(line[len(probe.MARKER):])
    return None


@dataclass(frozen=True)
class Endpoint:
    """A node as a transfer's sender or receiver: its spec entry, a shell on it, and whether it
    is this machine."""

    node: Node
    shell: NodeShell
    local: bool


@dataclass(frozen=True)
class Transfer:
    nbytes: int  # streamed after the round trips
    seconds: float  # the sender's clock, from its first streamed byte to the receiver's acknowledgement
    rtt_s: list[float]  # each one-byte round trip
    # with `shape`: the stream's first arrivals [seconds, bytes] and the UDP blast (link_shape.py)
    trace: list[list[float]] = field(default_factory=list)
    blast: link_shape.Blast | None = None
    shape_error: str | None = None  # why the `shape` stage failed (the figures above stand; no blast)
    # the stream's arrivals at the receiver, [seconds, bytes] at each 1/64 of its bytes (probe.py `_stream`)
    arrivals: list[list[float]] = field(default_factory=list)

    @property
    def stream_bytes_per_s(self) -> float:
        """The stream's bytes over its time, the token bucket's burst included."""
        return self.nbytes / self.seconds

    @cached_property  # read by the link's figures, its queue's bytes and the rings' agreement check alike
    def bytes_per_s(self) -> float:
        """The path's sustained rate: `steady_rate` of the receiver's arrivals past the bucket's
        burst, its pauses left out on a path between nodes (one asked for the `shape` stage, which
        `network_facts` asks of every path but the loopback, whatever the stage found: a blast that
        under-delivers on a loaded machine sees no queue on a shaped link too), where an idle link
        is the probes' scheduling; on the loopback the CPUs set the rate and their being elsewhere
        is part of it (left out, those pauses read a loopback under load at 1.7-4.6x its arrivals'
        span); where there are fewer than two (no kernel times, the receiver's line lost), the
        stream's bytes less the burst, which passed at once at its start, over the sender's time
        (without the burst taken out, a short stream reads a shaped link fast by burst / (rate x
        seconds): 1 % for 0.5 s at 100 Mbit/s behind a 64 KiB bucket, 10 % at 10 Mbit/s)."""
        steady = steady_rate(self.arrivals, self.burst_bytes, pauses_out=self.blast is not None or self.shape_error is not None)
        return steady if steady is not None else (self.nbytes - self.burst_bytes) / self.seconds

    @cached_property  # the blast's analysis, read by the rate, the queue and the burst alike
    def queue_seconds(self) -> float:
        """How long the path's sender queue holds when full; 0: no shaper seen, or none known
        (link_shape.py). Judged against the stream's rate, burst included, so that the burst
        (which needs a shaper) is not needed to tell whether there is one."""
        return link_shape.queue_seconds(self.blast, self.stream_bytes_per_s)

    @property
    def queue_bytes(self) -> float:
        """What the path's sender queue holds when full, in bytes of the sustained rate
        (`bytes_per_s`, as the cost model sends at it)."""
        return self.queue_seconds * self.bytes_per_s

    @cached_property  # the trace's analysis, read by the rate and by the facts
    def burst_bytes(self) -> float:
        """What the path's token bucket passes at once after an idle moment; 0 on a path whose
        queue is 0 (no shaper: the stream's early excess there is the machines' noise)."""
        return link_shape.burst_bytes(self.trace) if self.queue_seconds > 0 else 0.0

    @property
    def latency_s(self) -> float:
        """One way: half the median round trip."""
        return statistics.median(self.rtt_s) / 2


def steady_rate(arrivals: Sequence[Sequence[float]], burst_bytes: float = 0.0, *,
                pauses_out: bool = True) -> float | None:
    """The rate of the stream whose arrivals are `arrivals` ([seconds, bytes], at each 1/64 of its
    bytes, each at its own time) behind a token bucket that passed `burst_bytes` at once (0: none
    known): the bytes over the time of its windows (from one arrival to the next) from the first
    arrival past the burst (none known: from the second arrival) to the one before the last, less
    the pauses: windows whose time a byte is over PAUSE times the median window's, and those over
    SLOW times it with no neighbour that is too (and is no pause). With fewer than MIN_WINDOWS
    windows, or with `pauses_out` false, the span of those arrivals, pauses included; None for
    fewer than two of them.

    Why not its bytes over the sender's time to the acknowledgement (as before): that time also
    holds every scheduling delay of the two probe processes on their machines (the receiver reading
    the stream's end and answering, the sender waking for the answer) and every moment the link
    stood idle because one of them was descheduled (the sender's send buffer ran dry, the receiver's
    receive buffer filled), which on a busy machine are tens of milliseconds of a 0.5 s stream. The
    arrivals are the receiver's kernel's times, taken as the packets came whenever the probe read
    them. Bytes over time, not a median of the windows' rates: each window holds a 64th of the
    bytes, so on a varying rate the fast periods have more windows and a median leans to them (2
    and 1 GB/s alternating in equal times read 2.0, not 1.5). A pause that left the link idle makes
    the window across it slow: over PAUSE (3x) where the idle is twice a window's time (16 ms of a
    0.5 s stream), dropped with the window around it. A shorter idle, or one in a stream whose
    windows are long (clumps every 50 ms, below: a 50 ms idle makes one window 1.8x the others),
    is told from a slower period of a varying rate (a loopback's, bound by the CPUs, halves for
    tens of milliseconds) by its length: one window over SLOW (1.5x) between faster ones is a
    pause, several in a row are the rate. The bucket's burst arrives first, so the windows start
    past it; where it is not known (no `shape` stage, an unshaped path) they start at the second
    arrival, which passes a burst of up to a 64th of the stream (64 KiB of a 0.5 s stream at 10
    Mbit/s) but not a larger one (docs/profiling.md). On a busy receiving machine the kernel times packets in clumps (its
    receive work runs late and times what waited at once), and the probe keeps one arrival a clump:
    the bytes up to a clump came over the time since the one before, so its windows still read the
    rate, and a stream starved into a few clumps reads the span of them; but the last, the stream's
    end, is timed up to a clump's period after it came (the clumps before end where the next one's
    bytes begin), so the last window is left out (a 64th of the stream; its tail otherwise)."""
    start = next((i for i, (_, b) in enumerate(arrivals) if b >= burst_bytes), len(arrivals)) \
        if burst_bytes > 0 else 1
    past = [(float(t), float(b)) for t, b in arrivals[start:-1]]
    windows = [(t2 - t1, b2 - b1) for (t1, b1), (t2, b2) in itertools.pairwise(past) if t2 > t1 and b2 > b1]
    if len(windows) < MIN_WINDOWS or not pauses_out:
        if len(past) < 2 or past[-1][0] <= past[0][0]:
            return None
        return (past[-1][1] - past[0][1]) / (past[-1][0] - past[0][0])
    typical = statistics.median(seconds / nbytes for seconds, nbytes in windows)
    slow = [SLOW * typical < seconds / nbytes <= PAUSE * typical for seconds, nbytes in windows] + [False]
    kept = [(seconds, nbytes) for i, (seconds, nbytes) in enumerate(windows)
            if seconds / nbytes <= PAUSE * typical and not (slow[i] and not slow[i - 1] and not slow[i + 1])]
    return sum(nbytes for _, nbytes in kept) / sum(seconds for seconds, _ in kept)


class TransferError(Exception):
    """A transfer that did not complete; the message says why."""


def measure_transfer(sender: Endpoint, receiver: Endpoint, host: str, nbytes: int, *, pings: int = 0,
                     max_s: float | None = None, shape: bool = False, sndbuf: int | None = None) -> Transfer:
    """Time `pings` one-byte round trips, then stream up to `nbytes` (for at most `max_s` seconds)
    from `sender` to `receiver`, reached at `host`; with `shape`, trace the stream's start and
    blast UDP after it (the path's token bucket and queue; `sndbuf`: each blast socket's send buffer
    as asked for, standing for a host's net.core.wmem_max in a test). Every step is bounded by
    TRANSFER_TIMEOUT; a taken port is retried on another. Raises TransferError."""
    error = "not attempted"
    with ThreadPoolExecutor(max_workers=1) as pool:
        for _ in range(_BIND_ATTEMPTS):
            port = random.randint(40000, 59999)
            recv_cmd = probe_command(receiver.node, "recv",
                                     {"port": port, "timeout": TRANSFER_TIMEOUT, "pings": pings, "shape": shape},
                                     local=receiver.local)
            send_args = {"host": host, "port": port, "nbytes": nbytes, "connect_timeout": CONNECT_TIMEOUT,
                         "timeout": TRANSFER_TIMEOUT, "pings": pings, "max_s": max_s, "shape": shape, "sndbuf": sndbuf}
            send_cmd = probe_command(sender.node, "send", send_args, local=sender.local)
            received = pool.submit(receiver.shell.run, recv_cmd, TRANSFER_TIMEOUT + 10)
            sent = sender.shell.run(send_cmd, TRANSFER_TIMEOUT + 10)
            got = received.result()
            if got.returncode == probe.BIND_FAILED:
                error = f"port {port} taken on {host}"
                continue
            return sent_transfer(parse_probe(sent.stdout) or {"error": sent.stderr.strip()[-200:] or "sender timed out"})
    raise TransferError(error)


def sent_transfer(result: Mapping[str, Any]) -> Transfer:
    """The Transfer a `send` probe's result reports; raises TransferError for its error."""
    if "error" in result:
        raise TransferError(result["error"])
    receiver = result.get("receiver", {})  # checked by the probe (`_account`)
    blast = None
    if "sent" in result:
        blast = link_shape.Blast(result["sent"], result["send_s"], receiver.get("received", 0), receiver.get("arrival_s"))
    return Transfer(result["bytes"], result["seconds"], result["rtt_s"], receiver.get("trace", []), blast,
                    result.get("shape_error"), receiver.get("arrivals", []))
