"""The network facts' standing probes (launch/nodes/standing_probes.py): every node's probe started
at once, one message for the nodes whose probe did not start, and every probe started stopped
however the measurement ends: with shells that answer as the probes would, and with real probe
processes on this machine."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from adrun.launch.nodes import probe, standing_probes
from adrun.launch.nodes.shell import LocalShell, LocalStarted, Started
from adrun.launch.nodes.standing_probes import StandingProbes
from adrun.launch.nodes.transfer import Endpoint, TransferError
from adrun.spec import Node


class FakeStarted:
    """A `serve` probe as a started command: answers `ready` first (None: its output ends at once,
    having written `errors`), then each command with `result`; `stopped` is set by stop."""

    def __init__(self, ready: dict | None, result: dict | None = None, errors: str = "") -> None:
        self.out = [probe.MARKER + json.dumps(ready) + "\n"] if ready is not None else []
        self.result, self.error_text = result, errors
        self.commands: list[dict] = []
        self.stopped = threading.Event()

    def write(self, data: bytes) -> None:
        if self.stopped.is_set():
            raise OSError("closed")
        self.commands.append(json.loads(data))
        self.out.append(probe.MARKER + json.dumps(self.result) + "\n")

    def read(self, timeout: float) -> bytes:
        return self.out.pop(0).encode() if self.out else b""

    def errors(self) -> str:
        return self.error_text

    def stop(self, timeout: float) -> None:
        self.stopped.set()


class FakeShell:
    """A node's shell whose `start` gives `started` (or raises it), after `before_start()`."""

    def __init__(self, started: FakeStarted | Exception, before_start=lambda: None) -> None:
        self.started, self.before_start = started, before_start
        self.commands: list[str] = []

    def start(self, command: str, timeout: float) -> FakeStarted:
        self.commands.append(command)
        self.before_start()
        if isinstance(self.started, Exception):
            raise self.started
        return self.started


RESULT = {"bytes": 1_000_000, "seconds": 0.5, "rtt_s": [2e-4]}


def ready(port: int, boot_id: str | None = "b00t", cpus: int | None = 2) -> dict:
    return {"port": port, "boot_id": boot_id, "cpus": cpus}


def endpoint(address: str, shell) -> Endpoint:
    return Endpoint(Node(address=address), shell, False)


def test_every_probe_starts_at_once_and_says_its_port_and_machine():
    """Each start waits at a barrier of all three (two nodes and the spare): one at a time would break it."""
    barrier = threading.Barrier(3, timeout=60)
    shells = [FakeShell(FakeStarted(ready(40001 + i, cpus=2 + i), RESULT), barrier.wait) for i in range(3)]
    nodes = [endpoint("10.0.0.1", shells[0]), endpoint("10.0.0.2", shells[1])]
    spare = endpoint("10.0.0.1", shells[2])
    with StandingProbes(nodes, spare=spare, idle_s=60) as probes:
        assert probes.machines == {"10.0.0.1": ("b00t", 2), "10.0.0.2": ("b00t", 3)}
        done = probes.measure(nodes[0], nodes[1], "10.0.0.2", 1 << 20, pings=3, max_s=0.5, shape=True)
        probes.measure(nodes[0], nodes[0], "127.0.0.1", 1 << 20)
    assert done.bytes_per_s == 2e6
    # the first to the second node's port; the node to itself to the spare's
    assert [c["send"]["port"] for c in shells[0].started.commands] == [40002, 40003]
    assert shells[0].started.commands[0]["send"] | {"port": 0} == {
        "host": "10.0.0.2", "port": 0, "nbytes": 1 << 20, "connect_timeout": standing_probes.CONNECT_TIMEOUT,
        "timeout": standing_probes.TRANSFER_TIMEOUT, "pings": 3, "max_s": 0.5, "shape": True}
    assert all(" serve " in shell.commands[0] for shell in shells)
    assert all(shell.started.stopped.is_set() for shell in shells)


def test_a_node_that_cannot_tell_its_machine_says_none():
    nodes = [endpoint("10.0.0.1", FakeShell(FakeStarted(ready(40001, boot_id=None)))),
             endpoint("10.0.0.2", FakeShell(FakeStarted(ready(40002, cpus=None))))]
    with StandingProbes(nodes, idle_s=60) as probes:
        assert probes.machines == {"10.0.0.1": None, "10.0.0.2": None}


@pytest.mark.parametrize("ending", ["normal", "transfer-error", "exception", "ctrl-c"])
def test_every_probe_is_stopped_however_the_measurement_ends(ending):
    failing = {"error": "ConnectionRefusedError: [Errno 111] Connection refused"}
    shells = [FakeShell(FakeStarted(ready(40001 + i), failing if ending == "transfer-error" else RESULT))
              for i in range(3)]
    nodes = [endpoint(f"10.0.0.{i + 1}", shell) for i, shell in enumerate(shells)]
    raised = {"normal": None, "transfer-error": TransferError, "exception": RuntimeError,
              "ctrl-c": KeyboardInterrupt}[ending]
    try:
        with StandingProbes(nodes, idle_s=60) as probes:
            probes.measure(nodes[0], nodes[1], "10.0.0.2", 1000)
            if ending == "exception":
                raise RuntimeError("a bug while measuring")
            if ending == "ctrl-c":
                raise KeyboardInterrupt
    except BaseException as e:
        assert type(e) is raised
        if ending == "transfer-error":
            assert str(e) == "ConnectionRefusedError: [Errno 111] Connection refused"
    else:
        assert raised is None
    assert [shell.started.stopped.is_set() for shell in shells] == [True] * 3


def test_nodes_whose_probe_did_not_start_are_one_message_and_the_others_are_stopped():
    started = FakeStarted(ready(40001))
    python_missing = FakeStarted(None, errors="sh: 1: /opt/py/bin/python3: not found\n")
    nodes = [endpoint("10.0.0.1", FakeShell(started)), endpoint("10.0.0.2", FakeShell(python_missing)),
             endpoint("10.0.0.3", FakeShell(OSError("Channel closed."))),
             endpoint("10.0.0.4", FakeShell(FakeStarted({"error": "OSError: no port free for both TCP and UDP in 3 "
                                                                  "attempts"})))]
    with pytest.raises(TransferError) as failed:
        with StandingProbes(nodes, idle_s=60):
            raise AssertionError("entered although probes did not start")
    assert str(failed.value) == (
        "the probe did not start on 10.0.0.2 (ended: sh: 1: /opt/py/bin/python3: not found), nor on 10.0.0.3 "
        "(OSError: Channel closed.), nor on 10.0.0.4 (OSError: no port free for both TCP and UDP in 3 attempts)")
    assert started.stopped.is_set() and python_missing.stopped.is_set()


def test_a_probe_that_ends_mid_measurement_is_named_with_what_it_wrote():
    ending = FakeStarted(ready(40001), RESULT, errors="Traceback (most recent call last):\nMemoryError\n")
    nodes = [endpoint("10.0.0.1", FakeShell(ending)), endpoint("10.0.0.2", FakeShell(FakeStarted(ready(40002))))]
    ending.result = None
    ending.write = lambda data: None  # takes the command, then its output ends
    with pytest.raises(TransferError) as failed, StandingProbes(nodes, idle_s=60) as probes:
        probes.measure(nodes[0], nodes[1], "10.0.0.2", 1000)
    assert str(failed.value) == "the probe on 10.0.0.1 ended: Traceback (most recent call last): / MemoryError"
    assert ending.stopped.is_set()


def test_ctrl_c_while_probes_start_stops_those_started_after_it():
    """A real SIGINT while the second node's probe is still starting: the measurement ends at once,
    and that probe, started after, is stopped as it arrives. Python's own SIGINT handler is in
    place however pytest was started (tests/conftest.py `python_sigint`)."""
    late = FakeStarted(ready(40002))
    first = FakeStarted(ready(40001))
    holder: dict[str, StandingProbes] = {}

    def interrupt_then_wait_for_close():
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        deadline = time.monotonic() + 30
        while not holder["probes"].closed and time.monotonic() < deadline:
            time.sleep(0.01)

    nodes = [endpoint("10.0.0.1", FakeShell(first)), endpoint("10.0.0.2", FakeShell(late, interrupt_then_wait_for_close))]
    holder["probes"] = StandingProbes(nodes, idle_s=60)
    with pytest.raises(KeyboardInterrupt):
        with holder["probes"]:
            raise AssertionError("entered although interrupted")
    assert late.stopped.wait(30) and first.stopped.wait(30)


# real probe processes on this machine: two nodes at two of its loopback addresses

def local(address: str, **fields) -> Endpoint:
    return Endpoint(Node(address=address, **fields), LocalShell(), True)


def probes_running() -> list[psutil.Process]:
    return [child for child in psutil.Process().children(recursive=True) if child.is_running()
            and child.status() != psutil.STATUS_ZOMBIE]


def test_real_probes_measure_both_ways_and_the_loopback_and_leave_nothing_running():
    first, second = local("127.0.0.1"), local("127.0.0.2")
    with StandingProbes([first, second], spare=first, idle_s=60) as probes:
        assert len(probes_running()) == 3
        procs = [standing.started.proc for standing in [*probes.probes.values(), probes.spare_probe]]  # type: ignore
        machines = set(probes.machines.values())
        there = probes.measure(first, second, "127.0.0.2", 4 << 20, pings=3, max_s=0.2, shape=True)
        back = probes.measure(second, first, "127.0.0.1", 4 << 20, pings=3, max_s=0.2, shape=True)
        loop = probes.measure(first, first, "127.0.0.1", 4 << 20, pings=3, max_s=0.2)
    assert len(machines) == 1 and None not in machines  # one machine, one boot id
    for done in (there, back, loop):
        assert done.nbytes > 0 and done.bytes_per_s > 1e6 and len(done.rtt_s) == 3
    assert there.blast is not None and loop.blast is None  # the `shape` stage ran where asked
    assert [proc.returncode for proc in procs] == [0, 0, 0]  # each ended by itself as its input ended
    assert probes_running() == []


def test_real_probes_are_stopped_after_an_error_inside_the_measurement():
    nodes = [local("127.0.0.1"), local("127.0.0.2")]
    with pytest.raises(RuntimeError), StandingProbes(nodes, idle_s=60):
        assert len(probes_running()) == 2
        raise RuntimeError("a bug while measuring")
    assert probes_running() == []


def test_a_real_node_without_its_python_is_one_message_and_nothing_stays():
    nodes = [local("127.0.0.1"), local("127.0.0.2", python="/nonexistent/python3")]
    with pytest.raises(TransferError) as failed, StandingProbes(nodes, idle_s=60):
        pass
    message = str(failed.value)
    assert message.startswith("the probe did not start on 127.0.0.2 (ended: ")
    assert "/nonexistent/python3" in message and "127.0.0.1" not in message
    assert probes_running() == []


def test_a_real_probe_killed_mid_measurement_is_named_and_the_others_stopped():
    first, second = local("127.0.0.1"), local("127.0.0.2")
    with pytest.raises(TransferError) as failed, StandingProbes([first, second], idle_s=60) as probes:
        probes.probes["127.0.0.1"].started.proc.kill()  # type: ignore[attr-defined]
        probes.measure(first, second, "127.0.0.2", 1 << 20, max_s=0.1)
    assert str(failed.value).startswith("the probe on 127.0.0.1 ended: ")
    assert probes_running() == []


def test_a_real_probe_ends_by_itself_when_idle(monkeypatch):
    """Its launcher gone without ending its input: `idle_s` later it exits."""
    with StandingProbes([local("127.0.0.1")], idle_s=0.3) as probes:
        proc = probes.probes["127.0.0.1"].started.proc  # type: ignore[attr-defined]
        assert proc.wait(30) == 0
    assert probes_running() == []


class SilentStarted(FakeStarted):
    """A probe that says nothing more (each read times out) once it wrote `ready`, if anything."""

    def read(self, timeout: float) -> bytes:
        if self.out:
            return self.out.pop(0).encode()
        raise TimeoutError(f"no output within {timeout:.1f} s")


def test_a_probe_that_never_answers_its_start_is_named_and_the_others_stopped():
    silent, started = SilentStarted(None), FakeStarted(ready(40001))
    nodes = [endpoint("10.0.0.1", FakeShell(started)), endpoint("10.0.0.2", FakeShell(silent))]
    with pytest.raises(TransferError) as failed, StandingProbes(nodes, idle_s=60):
        raise AssertionError("entered although a probe did not start")
    assert str(failed.value) == (f"the probe did not start on 10.0.0.2 (gave no answer within "
                                 f"{standing_probes.START_TIMEOUT:.0f} s)")
    assert silent.stopped.is_set() and started.stopped.is_set()


def test_a_probe_that_never_answers_a_transfer_is_named_and_every_probe_stopped():
    silent, other = SilentStarted(ready(40001)), FakeStarted(ready(40002))
    silent.write = lambda data: None  # takes the command, answers nothing
    nodes = [endpoint("10.0.0.1", FakeShell(silent)), endpoint("10.0.0.2", FakeShell(other))]
    with pytest.raises(TransferError) as failed, StandingProbes(nodes, idle_s=60) as probes:
        probes.measure(nodes[0], nodes[1], "10.0.0.2", 1000)
    bound = standing_probes.CONNECT_TIMEOUT + standing_probes.TRANSFER_TIMEOUT + standing_probes.ANSWER_MARGIN_S
    assert str(failed.value) == f"the probe on 10.0.0.1 gave no answer within {bound:.0f} s"
    assert silent.stopped.is_set() and other.stopped.is_set()


def test_a_probe_that_keeps_writing_other_lines_gives_no_answer_past_its_bound(monkeypatch):
    """Each read brings a line that is not an answer, and a second passes: the bound ends the wait,
    though no read ever timed out."""
    clock = [0.0]

    class Chatty(FakeStarted):
        def read(self, timeout: float) -> bytes:
            clock[0] += 1.0
            return b"a line from the node's activate script\n" if clock[0] < 1000 else b""

    monkeypatch.setattr(standing_probes, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    standing = standing_probes.StandingProbe(endpoint("10.0.0.1", None), Chatty(None))
    with pytest.raises(TransferError) as failed:
        standing.answer(5)
    assert str(failed.value) == "gave no answer within 5 s"
    assert clock[0] <= 6


def test_a_real_probe_that_ignores_the_end_of_its_input_is_killed_and_nothing_stays(monkeypatch):
    """A node's Python that answers ready, then sleeps through the end of its input: killed
    STOP_S after its input ended."""
    script = f"import json, time; print({probe.MARKER!r} + json.dumps({{'port': 1}}), flush=True); time.sleep(120)"
    ignoring = f"exec {shlex.quote(sys.executable)} -c {shlex.quote(script)}"  # as probe_command

    class IgnoringShell(LocalShell):
        def start(self, command: str, timeout: float) -> Started:
            return LocalStarted(ignoring)

    monkeypatch.setattr(standing_probes, "START_TIMEOUT", 10.0)
    monkeypatch.setattr(standing_probes, "STOP_S", 0.2)
    with StandingProbes([Endpoint(Node(address="127.0.0.1"), IgnoringShell(), True)], idle_s=60) as probes:
        proc = probes.probes["127.0.0.1"].started.proc  # type: ignore[attr-defined]
        assert len(probes_running()) == 1
    assert proc.returncode == -signal.SIGKILL
    assert probes_running() == []
