"""Which processes a cluster spec asks for, and the TF cluster definition they share.

Worker 0 is the chief, so the chief node's workers come first; every process must agree on the
same ordering, which is why it is decided once, here, from the spec order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adrun.spec import ClusterSpec, Node
from adrun.task_context import Role


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
    def tag(self) -> str:
        """Short stable name (log file names, metrics): `w0`, `ps1`."""
        return f"w{self.index}" if self.role == "worker" else f"ps{self.index}"

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


def placements(spec: ClusterSpec, ports: Sequence[Sequence[int]]) -> list[tuple[Task, Node]]:
    """Every task of `spec` with the node it runs on: workers (chief node first), then PS tasks.

    `ports[i]` holds the ports of `spec.nodes[i]`: its workers' ports first, then its PS ports
    (see `adrun.launch.job.ports.allocate_ports`). The node is returned alongside so callers can read
    per-node settings (python, env) even when two nodes share an address.
    """
    nodes = list(spec.nodes)
    workers: list[tuple[Task, Node]] = []
    for pos in spec.worker_node_order():
        node = nodes[pos]
        for k in range(node.workers):
            workers.append((Task(Role.WORKER, len(workers), node.address, ports[pos][k]), node))

    ps: list[tuple[Task, Node]] = []
    for pos, node in enumerate(nodes):
        for k in range(node.ps):
            ps.append((Task(Role.PS, len(ps), node.address, ports[pos][node.workers + k]), node))
    return workers + ps


def plan_tasks(spec: ClusterSpec, ports: Sequence[Sequence[int]]) -> list[Task]:
    """The tasks of `spec` in the order of `placements`."""
    return [task for task, _ in placements(spec, ports)]


def cluster_def(tasks: Sequence[Task]) -> dict[str, list[str]]:
    """`{"ps": [...], "worker": [...]}` by task index; no "ps" key for a PS-less job (TF rejects empty jobs)."""
    cluster: dict[str, list[str]] = {}
    for role in ("ps", "worker"):
        addresses = [t.address for t in sorted((t for t in tasks if t.role == role), key=lambda t: t.index)]
        if addresses:
            cluster[role] = addresses
    return cluster
