"""The machines of a job behind one interface (launch/job/backends.py): the one choice per spec
node, and a supervisor that starts and sweeps only through each launch's backend."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import psutil
import pytest

from adrun.errors import UserError
from adrun.launch.job.backends import JobNodes, LocalNode, SshNode
from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.provision import RemoteNodes
from adrun.launch.job.supervisor import supervise
from adrun.launch.job.tasks import Task
from adrun.launch.job.teardown import kill_leftovers, leftover_processes
from adrun.spec import ClusterSpec
from tests.support.adrun_cli import new_job_id
from tests.support.job_configs import job_config
from tests.support.supervision import Recorder

pytestmark = pytest.mark.timeout(60)

HERE = socket.gethostname()  # this machine, by a name other nodes could reach
ELSEWHERE, SOMEWHERE = "203.0.113.7", "203.0.113.8"  # TEST-NET-3: never this machine


def _own_ip() -> str:
    """One of this machine's interface addresses besides loopback: this machine by another name."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    pytest.skip("this machine has no IPv4 address besides loopback")


def _spec(*addresses: str) -> ClusterSpec:
    return ClusterSpec.model_validate({"version": 1, "nodes": [
        {"address": address, "chief": pos == 0} for pos, address in enumerate(addresses)]})


def _connected(spec: ClusterSpec, *addresses: str) -> RemoteNodes:
    """RemoteNodes as `connect` leaves them, links stood in for (the choice only asks which exist)."""
    remote = RemoteNodes(spec)
    remote.links = {address: object() for address in addresses}  # type: ignore[misc]
    return remote


def test_each_machine_gets_one_backend_and_nodes_sharing_it_share_it():
    own_ip = _own_ip()
    spec = _spec(HERE, ELSEWHERE, own_ip, SOMEWHERE)

    nodes = JobNodes(spec, _connected(spec, ELSEWHERE, SOMEWHERE))

    here, elsewhere, again, somewhere = nodes.of_node
    assert isinstance(here, LocalNode) and again is here
    assert isinstance(elsewhere, SshNode) and isinstance(somewhere, SshNode) and elsewhere is not somewhere
    assert nodes.machines == [here, elsewhere, somewhere]
    assert [m.name for m in nodes.machines] == [f"{HERE}, {own_ip}", ELSEWHERE, SOMEWHERE]
    assert [len(m.nodes) for m in nodes.machines] == [2, 1, 1]


def test_a_node_neither_here_nor_connected_is_refused_by_name():
    spec = _spec(HERE, ELSEWHERE, SOMEWHERE)
    with pytest.raises(UserError, match=f"^node {SOMEWHERE} is not this machine and no SSH connection to it is open$"):
        JobNodes(spec, _connected(spec, ELSEWHERE))


def test_an_ssh_node_has_no_ports_before_it_was_prepared():
    spec = _spec(ELSEWHERE)
    with pytest.raises(UserError, match=f"node {ELSEWHERE}: no ports were chosen there"):
        JobNodes(spec, _connected(spec, ELSEWHERE)).ports()


class Machine(LocalNode):
    """This machine under another name: records what the supervisor asks of it."""

    def __init__(self, label: str, problems: list[str], log: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.label, self.problems, self.log = label, problems, log

    def start(self, argv, env, cwd, job_id, *, release=False):
        self.log.append((self.label, "start", env["TASK"]))
        return super().start(argv, env, cwd, job_id, release=release)

    def sweep(self, job_id):
        self.log.append((self.label, "sweep", job_id))
        super().sweep(job_id)
        return self.problems


def test_supervise_starts_each_task_on_its_machine_and_sweeps_every_machine_once(tmp_path):
    job_id = new_job_id()
    log: list[tuple[str, str, str]] = []
    a = Machine("a", [], log)
    b = Machine("b", ["b: processes [4242] survived SIGKILL"], log)

    def launch(task: Task, machine: Machine) -> TaskLaunch:
        env = dict(os.environ, ADRUN_JOB_ID=job_id, TASK=task.tag)
        code = "import time; time.sleep(600)" if task.role == "ps" else "pass"  # a PS serves until stopped
        return TaskLaunch(task, [sys.executable, "-c", code], env, Path(tmp_path), machine)

    launches = [launch(Task("worker", 0, "a", 0), a), launch(Task("worker", 1, "b", 0), b),
                launch(Task("ps", 0, "a", 0), a)]
    listener = Recorder()
    try:
        result = supervise(launches, job_config(job_id, grace_s=1.0), listener)
    finally:
        kill_leftovers(job_id)

    assert result.exit_code == 0
    starts = [entry for entry in log if entry[1] == "start"]
    assert starts == [("a", "start", "ps0"), ("a", "start", "w0"), ("b", "start", "w1")]  # PS first
    assert sorted(entry for entry in log if entry[1] == "sweep") == [("a", "sweep", job_id), ("b", "sweep", job_id)]
    assert log.index(("a", "sweep", job_id)) > len(starts) - 1  # after the job, not before
    assert listener.warnings == ["final sweep: b: processes [4242] survived SIGKILL"]
    assert leftover_processes(job_id) == []
