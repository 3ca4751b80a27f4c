"""The job's packet-filter rule: the commands it is made of, which machine gets which, and its
lifetime (tied to the process holding it). The lifetime tests install real nftables tables, so
they need root and `nft`; tests/cluster/test_exposure.py checks what another host sees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from adrun.launch.job import remote_agent
from adrun.launch.job.backends import THIS_MACHINE, LocalNode, NodeBackend, SshNode
from adrun.launch.job.fencing import JobFences, MachineRule, fence_plan
from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.remote import AGENT_SOURCE
from adrun.launch.job.tasks import Task
from adrun.launch.nodes import fence

pytestmark = pytest.mark.timeout(60)
needs_nft = pytest.mark.skipif(os.geteuid() != 0 or fence.nft_path() is None, reason="needs root and nft (nftables)")


def test_rule_commands_refuse_all_but_loopback_and_the_peers():
    commands = fence.rule_commands("adrun_j_a0", [23501, 23500, 23500], ["10.0.0.3", "10.0.0.2", "fd00::2"])
    assert commands == [
        "add table inet adrun_j_a0 { flags owner; }",
        "add chain inet adrun_j_a0 input { type filter hook input priority filter - 10; policy accept; }",
        'add rule inet adrun_j_a0 input iifname "lo" accept',
        "add rule inet adrun_j_a0 input ip saddr { 10.0.0.2, 10.0.0.3 } accept",
        "add rule inet adrun_j_a0 input ip6 saddr { fd00::2 } accept",
        "add rule inet adrun_j_a0 input tcp dport { 23500, 23501 } reject with tcp reset",
    ]
    alone = fence.rule_commands("adrun_j_a0", [23500], [])  # a job on this machine alone: loopback only
    assert [c for c in alone if "saddr" in c] == [] and alone[-1].endswith("tcp dport { 23500 } reject with tcp reset")


@pytest.mark.parametrize("table,ports,peers,error", [
    ("adrun_j; flush ruleset", [1], [], "not an nft table name"),
    ("adrun_j", [], [], "ports must be"),
    ("adrun_j", [70000], [], "ports must be"),
    ("adrun_j", [1], ["10.0.0.1 } accept; add rule x"], "does not appear to be an IPv4 or IPv6 address"),
])
def test_rule_commands_take_no_value_that_could_change_the_rule(table, ports, peers, error):
    with pytest.raises(ValueError, match=error):
        fence.rule_commands(table, ports, peers)


def test_table_names_are_per_job_and_attempt():
    assert fence.table_name("20261125-2141-ab12cd", 0) == "adrun_20261125_2141_ab12cd_a0"
    assert fence.table_name("my.job", 2) == "adrun_my_job_a2"


def _launches(*tasks: tuple[str, int, str, int, bool]) -> list[TaskLaunch]:
    """Launches of (role, index, host, port, remote) on their machines: this one, or one per host."""
    here = LocalNode()
    others: dict[str, NodeBackend] = {}
    return [TaskLaunch(Task(role, index, host, port, remote), [], {}, os.getcwd(),  # type: ignore[arg-type]
                       others.setdefault(host, SshNode(None, host)) if remote else here)  # type: ignore[arg-type]
            for role, index, host, port, remote in tasks]


def test_a_job_on_this_machine_alone_lets_in_nothing_but_loopback():
    launches = _launches(("worker", 0, "localhost", 23500, False), ("worker", 1, "localhost", 23501, False),
                         ("ps", 0, "localhost", 23502, False))
    def here() -> list[str]:
        raise AssertionError("a job on this machine alone needs none of its addresses")

    assert fence_plan(launches, {}.__getitem__, here) == [MachineRule(THIS_MACHINE, [23500, 23501, 23502], [])]


def test_each_machine_lets_in_the_job_s_other_machines_only():
    launches = _launches(("worker", 0, "10.0.0.1", 5000, False), ("ps", 0, "10.0.0.1", 5001, False),
                         ("worker", 1, "node2", 6000, True), ("worker", 2, "10.0.0.3", 7000, True),
                         ("ps", 1, "10.0.0.3", 7001, True))
    resolved = {"node2": ["10.0.0.2", "fd00::2"], "10.0.0.3": ["10.0.0.3"]}
    here = ["10.0.0.1", "192.168.1.5"]  # this machine's interfaces: its tasks may come from either
    assert fence_plan(launches, resolved.__getitem__, lambda: here) == [
        MachineRule(THIS_MACHINE, [5000, 5001], ["10.0.0.2", "10.0.0.3", "fd00::2"]),
        MachineRule("node2", [6000], ["10.0.0.1", "10.0.0.3", "192.168.1.5"]),
        MachineRule("10.0.0.3", [7000, 7001], ["10.0.0.1", "10.0.0.2", "192.168.1.5", "fd00::2"]),
    ]


def test_this_machine_s_addresses_are_its_interfaces_but_loopback(monkeypatch):
    import socket
    from collections import namedtuple

    import psutil

    from adrun.launch.job import fencing

    nic = namedtuple("nic", "family address")
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        "lo": [nic(socket.AF_INET, "127.0.0.1"), nic(socket.AF_INET6, "::1")],
        "eth0": [nic(socket.AF_INET, "10.0.0.1"), nic(socket.AF_INET6, "fe80::1%eth0"),
                 nic(socket.AF_INET6, "2001:db8::1"), nic(psutil.AF_LINK, "52:54:00:12:34:56")],
    })
    assert fencing.local_addresses() == ["10.0.0.1", "2001:db8::1"]


def test_the_warning_names_each_open_machine_and_the_knowing_opt_out():
    assert JobFences().warning() is None
    fences = JobFences(problems=["10.0.0.2 (nft: Operation not permitted (you must be root))"])
    warning = fences.warning()
    assert warning is not None
    assert "accept connections from any host" in warning and "10.0.0.2 (nft: Operation not permitted" in warning
    assert warning.endswith("pass --allow-exposed to run so knowingly, without this warning")


def _tables() -> str:
    return subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout


@needs_nft
def test_the_rule_lives_exactly_as_long_as_its_holder():
    table = fence.table_name(f"unit-{os.getpid()}", 0)
    held = fence.Fence(table, [9], ["10.0.0.2"])
    assert f"table inet {table}\n" in _tables()
    held.close()
    assert table not in _tables()


def _agent_fence(table: str) -> subprocess.Popen[str]:
    """The agent's `fence` mode run here as sshd would run it; returns once it says the rule holds."""
    args = {"table": table, "ports": [9], "peers": [], "lease_s": 30}
    proc = subprocess.Popen([sys.executable, "-c", AGENT_SOURCE, "fence", json.dumps(args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == remote_agent.MARKER + json.dumps({"table": table}) + "\n"
    return proc


def _wait_gone(table: str) -> None:
    deadline = time.monotonic() + 20
    while table in _tables():
        assert time.monotonic() < deadline, f"{table} outlived its holder"
        time.sleep(0.05)


@needs_nft
def test_a_node_s_rule_goes_with_the_launcher_s_channel():
    table = fence.table_name(f"unit-{os.getpid()}-eof", 0)
    proc = _agent_fence(table)
    assert f"table inet {table}\n" in _tables()
    assert proc.stdin is not None
    proc.stdin.close()  # what the end of the job, a dead launcher or a closed connection look like on the node
    assert proc.wait(timeout=20) == 0
    _wait_gone(table)


@needs_nft
def test_a_node_s_rule_goes_with_its_holder_even_killed():
    table = fence.table_name(f"unit-{os.getpid()}-kill", 0)
    proc = _agent_fence(table)
    os.kill(proc.pid, signal.SIGKILL)  # no cleanup code runs: nft's stdin closes, the kernel drops the table
    proc.wait(timeout=20)
    _wait_gone(table)


def test_a_fence_that_cannot_be_installed_says_why(monkeypatch):
    monkeypatch.setattr(fence, "nft_path", lambda: None)
    with pytest.raises(fence.FenceError, match="nft \\(nftables\\) is not installed: on Debian, apt-get install nftables"):
        fence.Fence("adrun_x_a0", [9], [])
    assert fence.fence_problem() == "nft (nftables) is not installed: on Debian, apt-get install nftables"


class _Heard:
    """A JobListener that keeps what the attempt said before its tasks would start."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def warning(self, message: str) -> None:
        self.events.append(f"warning: {message}")


@pytest.mark.parametrize("case", ["refused", "installed", "allow_exposed"])
def test_an_attempt_warns_of_an_open_machine_before_its_tasks_start(monkeypatch, spec_file, tmp_path, case):
    """Where no rule can be installed, the warning comes before `supervise` starts anything; a
    rule installed is closed after it; --allow-exposed tries nothing, says nothing."""
    from adrun.launch.job import attempt, backends
    from adrun.launch.job.backends import JobNodes
    from adrun.launch.job.config import JobConfig
    from adrun.launch.job.metrics import Throughput
    from adrun.launch.job.provision import RemoteNodes
    from adrun.launch.job.results import JobResult
    from adrun.spec import load_spec

    events: list[str] = []

    class Installed:
        def __init__(self, table, ports, peers):
            events.append(f"fence {table} {sorted(ports)} {peers}")
            if case == "refused":
                raise fence.FenceError("nft: Operation not permitted (you must be root)")

        def close(self):
            events.append("close")

    def supervise(launches, config, listener, **kwargs):
        events.append(f"supervise {sorted(launch.task.port for launch in launches)}")
        return JobResult(0, None, False, Throughput(), [], 0.0)

    monkeypatch.setattr(backends, "Fence", Installed)
    monkeypatch.setattr(attempt, "supervise", supervise)
    spec = load_spec(spec_file(workers=2, ps=1, base_port=23700))
    config = JobConfig(job_id="fence-test", spec=spec, script=tmp_path / "t.py", script_args=[],
                       strategy_file=tmp_path / "strategy.yml", allow_exposed=case == "allow_exposed")
    with RemoteNodes(spec) as remote:
        attempt.run_attempt(config, JobNodes(spec, remote), _Heard(events), attempt=1)  # type: ignore[arg-type]
    if case == "allow_exposed":
        assert events == ["supervise [23700, 23701, 23702]"]
        return
    if case == "installed":
        assert events == ["fence adrun_fence_test_a1 [23700, 23701, 23702] []", "supervise [23700, 23701, 23702]",
                          "close"]
        return
    assert events[0] == "fence adrun_fence_test_a1 [23700, 23701, 23702] []"
    assert events[1].startswith("warning: the job's TensorFlow servers accept connections from any host")
    assert "on this machine (nft: Operation not permitted (you must be root))" in events[1]
    assert events[2:] == ["supervise [23700, 23701, 23702]"]
