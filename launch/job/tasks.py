"""Which processes a cluster spec asks for, on which port, and the TF cluster definition they share.

The numbering and the names of the tasks are adrun/placement.py's, which the planner uses too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adrun.placement import Role, TaskId, placements
from adrun.spec import ClusterSpec, Node


@dataclass(frozen=True)
class Task:
    """One process of a job: a worker running the script or a parameter server."""

    role: Role
    index: int
    host: str
    port: int
    remote: bool = False  # started over SSH on another machine

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))  # `Task("worker", ...)` holds the enum too

    @property
    def id(self) -> TaskId:
        return TaskId(self.role, self.index)

    @property
    def tag(self) -> str:
        """Short stable name (log file names, metrics): `w0`, `ps1`."""
        return self.id.tag

    @property
    def label(self) -> str:
        """The output prefix and the name in messages: `w0` here, `w1@10.0.0.2` on another node,
        so a line or a failure says which machine to look at."""
        return f"{self.tag}@{self.host}" if self.remote else self.tag

    @property
    def address(self) -> str:
        """`host:port` as TF's ClusterSpec expects it (IPv6 literals in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def placed_tasks(spec: ClusterSpec, ports: Sequence[Sequence[int]]) -> list[tuple[Task, Node]]:
    """Every task of `spec` with the node it runs on, in adrun.placement's order (workers, then PS
    tasks).

    `ports[i]` holds the ports of `spec.nodes[i]`: its workers' ports first, then its PS ports
    (see `adrun.launch.job.ports.allocate_ports`). The node is returned alongside so callers can read
    per-node settings (python, env) even when two nodes share an address.
    """
    return [
        (Task(p.task.role, p.task.index, spec.nodes[p.node].address, ports[p.node][p.slot]), spec.nodes[p.node])
        for p in placements(spec)
    ]


def plan_tasks(spec: ClusterSpec, ports: Sequence[Sequence[int]]) -> list[Task]:
    """The tasks of `spec` in the order of `placed_tasks`."""
    return [task for task, _ in placed_tasks(spec, ports)]


def cluster_def(tasks: Sequence[Task]) -> dict[str, list[str]]:
    """`{"ps": [...], "worker": [...]}` by task index; no "ps" key for a PS-less job (TF rejects empty jobs)."""
    cluster: dict[str, list[str]] = {}
    for task in sorted(tasks, key=lambda t: (t.role != "ps", t.index)):
        cluster.setdefault(task.id.job, []).append(task.address)
    return cluster
