"""The network facts' probes, one per node, started once and kept for a whole measurement.

Why: measured on namespace hosts (bench/network_rounds.py), starting a round's probe processes
over SSH (a Python and the probe's source for each end of each transfer) took 0.6 s of a round of 2
transfers and 1.1 s of a round of 4 on this 2-CPU machine, more than half of it; the transfer itself
0.9 s. So each node runs one `serve` probe (launch/nodes/probe.py) for the whole measurement: it
listens on a port the kernel chose, receives every transfer sent to it, and sends a transfer when
told to on its input. Its first answer also says the node's machine (boot id, CPUs), which the
facts need anyway (`machines`). A round then costs its transfers, not their processes' start.

Lifecycle: `StandingProbes` is a context manager. Entering starts every node's probe at once (and
a `spare` one on a node, for the loopback: a transfer from a node to itself needs a second process
there) and waits for each one's first answer; a node that does not answer fails the start with one
message naming every such node and why (its probe's error, or what its shell wrote), after the
others were stopped. Leaving (also on an error or Ctrl-C) stops every probe that was started: its
input ends, which ends it; the channel is closed (a local one killed) after STOP_S. A probe also
ends by itself when its input ends because the launcher is gone, or after `idle_s` with neither a
transfer nor a command (the launcher gone without closing the connection), and bounds each transfer.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import probe
from .parallel import each
from .shell import Started
from .transfer import CONNECT_TIMEOUT, TRANSFER_TIMEOUT, Endpoint, Transfer, TransferError, probe_command, sent_transfer

START_TIMEOUT = 30.0  # a probe's first answer: an SSH channel, the node's activate script, a Python
ANSWER_MARGIN_S = 10.0  # a transfer's answer may come this long after the probe's own bounds
STOP_S = 5.0  # a probe whose input ended exits at once when idle, or at the end of its transfer
OUTPUT_LINES = 3  # of what a probe that ended wrote, kept for its message


def _answer(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise TransferError(f"answered what is not a result: {text:.80}")
    return found


def idle_bound(nodes: int) -> float:
    """How long a node's probe may wait for its next transfer or command: twice a ring's (or a full
    schedule's round pair's) transfers one after another, each within its own bounds; a node sends
    or receives in every ring, and in every other round of the full schedule."""
    return 2 * nodes * (CONNECT_TIMEOUT + TRANSFER_TIMEOUT + ANSWER_MARGIN_S)


class StandingProbe:
    """One node's running `serve` probe: its port, its machine, and its answers read line by line."""

    def __init__(self, endpoint: Endpoint, started: Started) -> None:
        self.endpoint, self.started = endpoint, started
        self.buffer = b""
        self.output: list[str] = []  # what it wrote beside its answers, the last OUTPUT_LINES lines
        self.ready: dict[str, Any] = {}

    @property
    def address(self) -> str:
        return self.endpoint.node.address

    @property
    def port(self) -> int:
        return int(self.ready["port"])

    def answer(self, timeout: float) -> dict[str, Any]:
        """Its next answer, read for at most `timeout` seconds; raises TransferError saying what
        happened instead ("ended: ...", "gave no answer within ...")."""
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() >= deadline:  # a probe writing lines other than answers
                raise TransferError(f"gave no answer within {timeout:.0f} s")
            line, newline, rest = self.buffer.partition(b"\n")
            if newline:
                self.buffer = rest
                text = line.decode(errors="replace").rstrip()
                if text.startswith(probe.MARKER):
                    return _answer(text[len(probe.MARKER):])
                self.output = [*self.output, text][-OUTPUT_LINES:] if text else self.output
                continue
            try:
                data = self.started.read(deadline - time.monotonic())
            except TimeoutError:
                raise TransferError(f"gave no answer within {timeout:.0f} s") from None
            except OSError as e:  # its output closed under the read: stopped meanwhile
                raise TransferError(f"ended: {e}") from None
            if not data:
                raise TransferError(f"ended: {self.why()}")
            self.buffer += data

    def ask(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Its answer to `command`; raises TransferError naming the node."""
        try:
            self.started.write(json.dumps(command).encode() + b"\n")
            return self.answer(timeout)
        except OSError:  # its input closed: it ended
            raise TransferError(f"the probe on {self.address} ended: {self.why()}") from None
        except TransferError as e:
            raise TransferError(f"the probe on {self.address} {e}") from None

    def why(self) -> str:
        """What the probe wrote that may say why it ended: its standard error, else its output."""
        lines = [line for line in self.started.errors().splitlines() if line.strip()] or self.output
        return " / ".join(lines[-OUTPUT_LINES:]) or "no output"


class StandingProbes:
    """Every node's probe for one measurement (module docstring): `machines` and `measure` between
    entering and leaving."""

    def __init__(self, endpoints: Sequence[Endpoint], *, spare: Endpoint | None = None,
                 idle_s: float | None = None) -> None:
        self.endpoints, self.spare = list(endpoints), spare
        self.idle_s = idle_bound(len(self.endpoints)) if idle_s is None else idle_s
        self.lock = threading.Lock()
        self.running: list[StandingProbe] = []  # every probe started, ready or not: each is stopped
        self.closed = False
        self.probes: dict[str, StandingProbe] = {}
        self.spare_probe: StandingProbe | None = None

    def __enter__(self) -> StandingProbes:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def machines(self) -> dict[str, tuple[str, int] | None]:
        """Each node's (kernel boot id, usable CPUs), as its probe said; None when it could not tell."""
        found: dict[str, tuple[str, int] | None] = {}
        for address, standing in self.probes.items():
            boot_id, cpus = standing.ready.get("boot_id"), standing.ready.get("cpus")
            if isinstance(boot_id, str) and isinstance(cpus, int):
                found[address] = (boot_id, cpus)
            else:
                found[address] = None
        return found

    def measure(self, sender: Endpoint, receiver: Endpoint, host: str, nbytes: int, *, pings: int = 0,
                max_s: float | None = None, shape: bool = False) -> Transfer:
        """As transfer.measure_transfer, between the two nodes' standing probes (a node to itself:
        to the spare probe there). Raises TransferError."""
        through = self.probes[sender.node.address]
        to = self.spare_probe if receiver.node.address == sender.node.address else self.probes[receiver.node.address]
        if to is None:
            raise TransferError(f"no spare probe on {receiver.node.address} to receive its own transfer (an adrun bug)")
        args = {"host": host, "port": to.port, "nbytes": nbytes, "connect_timeout": CONNECT_TIMEOUT,
                "timeout": TRANSFER_TIMEOUT, "pings": pings, "max_s": max_s, "shape": shape}
        return sent_transfer(through.ask({"send": args}, CONNECT_TIMEOUT + TRANSFER_TIMEOUT + ANSWER_MARGIN_S))

    def close(self) -> None:
        """Stop every probe started, at once; also those a start still under way (Ctrl-C) starts after."""
        with self.lock:
            self.closed = True
            running, self.running = self.running, []
        each(running, lambda standing: standing.started.stop(STOP_S))

    def _start(self) -> None:
        which = [(endpoint, False) for endpoint in self.endpoints] + ([(self.spare, True)] if self.spare else [])
        outcomes = each(which, lambda item: self._start_one(item[0]))
        failed = [f"{endpoint.node.address} ({outcome})" for (endpoint, _), outcome in zip(which, outcomes, strict=True)
                  if isinstance(outcome, str)]
        if failed:
            raise TransferError("the probe did not start on " + ", nor on ".join(dict.fromkeys(failed)))
        for (endpoint, spare), standing in zip(which, outcomes, strict=True):
            assert isinstance(standing, StandingProbe)
            if spare:
                self.spare_probe = standing
            else:
                self.probes[endpoint.node.address] = standing

    def _start_one(self, endpoint: Endpoint) -> StandingProbe | str:
        """The node's probe, ready; or why it is not (stopped then, as every probe started is by `close`)."""
        command = probe_command(endpoint.node, "serve", {"timeout": TRANSFER_TIMEOUT, "idle_s": self.idle_s},
                                local=endpoint.local)
        try:
            started = endpoint.shell.start(command, START_TIMEOUT)
        except Exception as e:  # OSError or paramiko's SSHException: the node's shell refused
            return f"{type(e).__name__}: {e}"
        standing = StandingProbe(endpoint, started)
        with self.lock:
            keep = not self.closed
            if keep:
                self.running.append(standing)
        if not keep:  # the measurement ended (Ctrl-C) while this one started
            started.stop(STOP_S)
            return "stopped: the measurement ended"
        try:
            standing.ready = standing.answer(START_TIMEOUT)
        except TransferError as e:
            return str(e)
        if "error" in standing.ready:
            return str(standing.ready["error"])
        if not isinstance(standing.ready.get("port"), int):
            return f"no port in its answer {standing.ready!r:.80}"
        return standing
