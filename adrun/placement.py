"""Which task of a job runs where, and what it is called: the one numbering of a job's tasks.

The launcher (which process to start on which node, launch/job/tasks.py), the planner (which hosts
a planned transfer crosses, strategies/wire_bound.py) and the runtime (TF device strings) must agree
on it, so it is decided here once, from the cluster spec alone: worker 0 is the chief, so the chief
node's workers come first, then the other nodes' in spec order; PS tasks are numbered in node order.

A task has one display name, its tag (`w0`, `ps1`: output prefixes, log file names, plan notes, the
transfers of the wire bound); its TF names derive from it: the job (`worker`, `ps`) and the device
strings (`/job:ps/task:1/device:CPU:0`). TF-free, importing only `adrun.str_enum`, so that
launch/, strategies/ and the runtime can all import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from adrun.str_enum import StrEnum

if TYPE_CHECKING:
    from adrun.spec import ClusterSpec



class Role(StrEnum):
    """What a task of a job runs: the user's script (`worker`) or a parameter server (`ps`); its
    value is TF's job name and the text in the environment, YAML and JSON."""

    WORKER = "worker"
    PS = "ps"


TAG_PREFIX: dict[Role, str] = {Role.WORKER: "w", Role.PS: "ps"}


@dataclass(frozen=True, order=True)
class TaskId:
    """One task of a job by role and index within the role."""

    role: Role
    index: int

    @property
    def tag(self) -> str:
        """The task's name wherever adrun shows one: `w0`, `ps1`."""
        return f"{TAG_PREFIX[self.role]}{self.index}"

    @property
    def job(self) -> str:
        """TF's job name of the task (`tf.train.ClusterSpec`, `tf.distribute.Server`)."""
        return self.role.value

    def device(self, local: str = "CPU:0") -> str:
        """A device of this task as TF names it: `/job:worker/task:0/device:GPU:1`."""
        return f"/job:{self.job}/task:{self.index}/device:{local}"

    def __str__(self) -> str:
        return self.tag


def worker(index: int) -> TaskId:
    return TaskId(Role.WORKER, index)


def ps(index: int) -> TaskId:
    return TaskId(Role.PS, index)


@dataclass(frozen=True)
class Placement:
    """Where one task runs: the position of its node in `spec.nodes`, and its slot among that
    node's processes (the node's workers first, then its PS tasks: the order of the node's ports)."""

    task: TaskId
    node: int
    slot: int


def worker_node_order(spec: ClusterSpec) -> list[int]:
    """Positions of the nodes in the order their workers get task indices: the chief node first
    (the one marked `chief: true`, else the first), then the others in spec order."""
    chief = next((i for i, node in enumerate(spec.nodes) if node.chief), 0)
    return [chief] + [i for i in range(len(spec.nodes)) if i != chief]


def placements(spec: ClusterSpec) -> list[Placement]:
    """Every task of `spec` with where it runs: the workers by index, then the PS tasks by index."""
    workers = [(pos, k) for pos in worker_node_order(spec) for k in range(spec.nodes[pos].workers)]
    ps_tasks = [(pos, node.workers + k) for pos, node in enumerate(spec.nodes) for k in range(node.ps)]
    return ([Placement(worker(i), pos, slot) for i, (pos, slot) in enumerate(workers)]
            + [Placement(ps(i), pos, slot) for i, (pos, slot) in enumerate(ps_tasks)])


def task_hosts(spec: ClusterSpec) -> dict[TaskId, str]:
    """The host (node address) of every task of `spec`."""
    return {p.task: spec.nodes[p.node].address for p in placements(spec)}


def replica_devices(spec: ClusterSpec) -> list[list[str]]:
    """By worker index: the local devices of that worker's in-graph replicas (`GPU:0`.. of the GPUs
    the launcher makes visible to it, or virtual `CPU:0`..)."""
    out = []
    for p in placements(spec):
        if p.task.role == "worker":
            node = spec.nodes[p.node]
            out.append([f"{node.replica_device_type}:{k}" for k in range(node.replicas_per_worker)])
    return out
