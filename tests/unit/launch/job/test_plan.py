"""Planning a job: task order, cluster definition, ports, and the launches built from a spec."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from adrun.errors import UserError
from adrun.launch.job.backends import JobNodes
from adrun.launch.job.plan import plan_job
from adrun.launch.job.ports import allocate_ports
from adrun.launch.job.tasks import Task, cluster_def, plan_tasks
from tests.support.ports import free_port_run

pytestmark = pytest.mark.timeout(30)


@dataclass
class Node:
    """Stand-in for adrun.spec's node: only the attributes the launcher reads."""

    address: str = "localhost"
    workers: int = 1
    ps: int = 0
    chief: bool = False
    python: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    base_port: int | None = None
    gpus: int = 0
    replicas_per_worker: int = 1


@dataclass
class Spec:
    nodes: list[Node]



def test_workers_start_on_the_chief_node_and_ps_follow_node_order():
    a, b, c = Node("hostA", workers=1, ps=1), Node("hostB", workers=2, chief=True), Node("hostC", workers=1, ps=1)
    ports = [[1000, 1001], [2000, 2001], [3000, 3001]]

    tasks = plan_tasks(Spec([a, b, c]), ports)

    assert tasks == [
        Task("worker", 0, "hostB", 2000),
        Task("worker", 1, "hostB", 2001),
        Task("worker", 2, "hostA", 1000),
        Task("worker", 3, "hostC", 3000),
        Task("ps", 0, "hostA", 1001),
        Task("ps", 1, "hostC", 3001),
    ]
    assert cluster_def(tasks) == {
        "ps": ["hostA:1001", "hostC:3001"],
        "worker": ["hostB:2000", "hostB:2001", "hostA:1000", "hostC:3000"],
    }


def test_cluster_def_has_no_ps_key_without_ps_tasks():
    tasks = plan_tasks(Spec([Node(workers=2)]), [[5000, 5001]])
    assert cluster_def(tasks) == {"worker": ["localhost:5000", "localhost:5001"]}


def test_task_tag_and_address():
    assert Task("worker", 3, "h", 1).tag == "w3"
    assert Task("ps", 0, "h", 1).tag == "ps0"
    assert Task("ps", 0, "10.0.0.1", 23000).address == "10.0.0.1:23000"
    assert Task("worker", 0, "::1", 23000).address == "[::1]:23000"


def test_free_ports_are_distinct_and_bindable():
    spec = Spec([Node("localhost", workers=3, ps=1), Node("127.0.0.1", workers=1, ps=1)])

    ports = allocate_ports(spec.nodes)

    assert [len(p) for p in ports] == [4, 2]
    flat = [p for node in ports for p in node]
    assert len(set(flat)) == len(flat)
    for port in flat:  # released again for the tasks to take
        with socket.socket() as s:
            s.bind(("", port))


def test_base_port_gives_consecutive_ports():
    base = free_port_run(3)
    spec = Spec([Node(workers=2, ps=1, base_port=base)])
    assert allocate_ports(spec.nodes) == [[base, base + 1, base + 2]]


def test_port_in_use_names_host_port_and_holder():
    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        port = int(holder.stdout.readline())
        with pytest.raises(UserError) as err:
            allocate_ports([Node("localhost", workers=1, base_port=port)])
    finally:
        holder.kill()
        holder.wait()
    message = str(err.value)
    assert message.startswith(f"port {port} on localhost is already in use (pid {holder.pid}, python")
    assert "base_port" in message


def test_overlapping_base_ports_on_this_machine_are_rejected():
    base = free_port_run(3)
    spec = Spec([Node("localhost", workers=2, base_port=base), Node("127.0.0.1", workers=1, base_port=base + 1)])
    with pytest.raises(UserError, match=f"port {base + 1} on 127.0.0.1 would be used by two tasks"):
        allocate_ports(spec.nodes)


def test_plan_job_builds_commands_and_contract(tmp_path):
    base = free_port_run(3)
    spec = Spec([Node("localhost", workers=2, ps=1, base_port=base, python="/opt/py/bin/python3", env={"FOO": "bar"})])

    launches = plan_job(
        spec, "train.py", ["--steps", "3"], job_id="j1", strategy_file=tmp_path / "s.yml",
        nodes=JobNodes(spec, hook_dir="/hook"), cwd=tmp_path, base_env={"PYTHONPATH": "/mine", "PATH": "/bin"},
    )

    by_tag = {launch.task.tag: launch for launch in launches}
    assert sorted(by_tag) == ["ps0", "w0", "w1"]
    assert by_tag["w1"].argv == ["/opt/py/bin/python3", "train.py", "--steps", "3"]
    assert by_tag["ps0"].argv == ["/opt/py/bin/python3", "-m", "adrun.runtime.ps_server"]
    expected_cluster = {"ps": [f"localhost:{base + 2}"], "worker": [f"localhost:{base}", f"localhost:{base + 1}"]}
    for launch in launches:
        assert launch.cwd == tmp_path
        assert json.loads(launch.env["ADRUN_CLUSTER"]) == expected_cluster
        assert launch.env["ADRUN_NUM_WORKERS"] == "2"
        assert launch.env["ADRUN_MODE"] == "run"
        assert launch.env["ADRUN_STRATEGY_FILE"] == str(tmp_path / "s.yml")
        assert launch.env["PYTHONPATH"] == os.pathsep.join(["/hook", "/mine"])
        assert launch.env["FOO"] == "bar"


def test_plan_job_defaults_to_the_launchers_python():
    launches = plan_job(Spec([Node(workers=1)]), "t.py", [], job_id="j", strategy_file="s.yml", base_env={})
    assert launches[0].argv[0] == sys.executable


def test_plan_job_reads_the_real_cluster_spec():
    from adrun.spec import ClusterSpec

    spec = ClusterSpec.model_validate({"version": 1, "nodes": [{"address": "localhost", "workers": 2, "ps": 1}]})
    launches = plan_job(spec, "t.py", [], job_id="j", strategy_file="s.yml", base_env={})
    assert [launch.task.tag for launch in launches] == ["w0", "w1", "ps0"]


def test_each_worker_of_a_gpu_node_sees_exactly_its_own_gpu():
    """`gpus: 4` without `workers`: four workers, worker k seeing GPU k as its GPU:0 (the TF2 plan's
    one device per process), the PS none."""
    from adrun.spec import ClusterSpec

    spec = ClusterSpec.model_validate({"version": 1, "nodes": [{"address": "localhost", "gpus": 4, "ps": 1}]})
    launches = plan_job(spec, "t.py", [], job_id="j", strategy_file="s.yml", base_env={})
    seen = {launch.task.tag: launch.env.get("CUDA_VISIBLE_DEVICES") for launch in launches}
    assert seen == {"w0": "0", "w1": "1", "w2": "2", "w3": "3", "ps0": ""}


def test_plan_job_rejects_a_remote_node():
    spec = Spec([Node("localhost", workers=1, chief=True), Node("203.0.113.7", workers=1)])
    with pytest.raises(UserError, match="node 203.0.113.7 is not this machine and no SSH connection"):
        plan_job(spec, "t.py", [], job_id="j", strategy_file="s.yml")
