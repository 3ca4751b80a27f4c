"""The one numbering of a job's tasks (adrun/placement.py), and that the launcher, the planner and
the runtime all take it from there."""

from __future__ import annotations

import json
import subprocess
import sys

from adrun.graph_item import GraphItem
from adrun.launch.job.tasks import Task, cluster_def, plan_tasks
from adrun.placement import Placement, TaskId, placements, ps, replica_devices, task_hosts, worker
from adrun.runtime.kernels.devices import ps_device, worker_device
from adrun.spec import ClusterSpec, Node
from adrun.strategies import build_strategy
from adrun.strategies.wire_bound import step_transfers
from tests.support.cost_facts import var

# the chief in the middle, a node with PS tasks only, a node with GPU replicas
SPEC = ClusterSpec(version=1, nodes=[
    Node(address="a", workers=1, ps=1, replicas=2),
    Node(address="b", chief=True, workers=2, ps=0, gpus=2),
    Node(address="c", workers=0, ps=2),
])


def test_workers_from_the_chief_node_first_then_ps_tasks_in_node_order():
    assert placements(SPEC) == [
        Placement(worker(0), node=1, slot=0), Placement(worker(1), node=1, slot=1), Placement(worker(2), node=0, slot=0),
        Placement(ps(0), node=0, slot=1), Placement(ps(1), node=2, slot=0), Placement(ps(2), node=2, slot=1),
    ]
    assert task_hosts(SPEC) == {
        worker(0): "b", worker(1): "b", worker(2): "a", ps(0): "a", ps(1): "c", ps(2): "c",
    }
    # one GPU per worker on the chief node, two virtual CPUs for the worker on node a
    assert replica_devices(SPEC) == [["GPU:0"], ["GPU:0"], ["CPU:0", "CPU:1"]]


def test_one_name_for_display_and_the_tf_names_derived_from_it():
    assert (worker(3).tag, ps(1).tag, str(ps(1))) == ("w3", "ps1", "ps1")
    assert (worker(3).job, ps(1).job) == ("worker", "ps")
    assert ps(1).device() == "/job:ps/task:1/device:CPU:0" == ps_device(1)
    assert worker(2).device("GPU:1") == "/job:worker/task:2/device:GPU:1" == worker_device(2, "GPU:1")
    assert sorted([worker(1), ps(0), worker(0)]) == [TaskId("ps", 0), TaskId("worker", 0), TaskId("worker", 1)]


def test_the_launcher_and_the_planner_place_every_task_alike():
    """The tasks the launcher starts sit on the hosts the wire bound charges their transfers to."""
    ports = [[1000, 1001], [2000, 2001], [3000, 3001]]
    tasks = plan_tasks(SPEC, ports)
    assert tasks == [Task("worker", 0, "b", 2000), Task("worker", 1, "b", 2001), Task("worker", 2, "a", 1000),
                     Task("ps", 0, "a", 1001), Task("ps", 1, "c", 3000), Task("ps", 2, "c", 3001)]
    assert {t.id: t.host for t in tasks} == task_hosts(SPEC)
    assert [t.tag for t in tasks] == ["w0", "w1", "w2", "ps0", "ps1", "ps2"]
    assert cluster_def(tasks) == {"ps": ["a:1001", "c:3000", "c:3001"], "worker": ["b:2000", "b:2001", "a:1000"]}
    plan = build_strategy("PS", GraphItem(variables=[var("w", [4, 4])]), SPEC)
    assert {t.source for t in step_transfers(plan, {})} == {ps(0), worker(0), worker(1), worker(2)}


def test_placement_is_light_enough_for_every_layer():
    """launch/, strategies/ and the runtime import it: it loads nothing of adrun's beyond itself and its enum base."""
    code = ("import json, sys, adrun.placement; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('adrun') or m in ('pydantic', 'tensorflow'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["adrun", "adrun.placement", "adrun.str_enum"]
