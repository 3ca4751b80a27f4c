"""The machines a job runs on, each behind one interface: this machine (`LocalNode`) or another
node reached over SSH (`SshNode`).

Why one interface: planning, supervising and tearing down a job do the same things on every
machine (choose ports, start a task, sweep the job's leftovers, count the bytes it moved) and
differ only in how; each backend holds one "how", and the choice between them is made once per
node, here (`JobNodes`), so no other module asks whether a task is local. A backend also holds
the job's packet-filter rule on its machine (`fence`; which rule is `fencing`'s decision). A backend stands for a
machine, not a spec node: the spec nodes sharing it share its ports, sweep and byte counters.
"""

from __future__ import annotations

import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

import psutil

from adrun.errors import UserError
from adrun.spec import ClusterSpec, Node
from adrun.task_context import TaskContext

from ..env import HOOK_DIR, remote_task_env, task_env
from ..nodes.command import node_workdir
from ..nodes.fence import Fence
from ..nodes.hosts import is_local_host
from ..nodes.node_tools import file_sha256
from .local import LocalProcess
from ..nodes.parallel import each
from .ports import allocate_ports
from .process import TaskProcess
from .provision import RemoteNodes, taken_message
from .teardown import kill_leftovers

T = TypeVar("T")
R = TypeVar("R")

Counters = tuple[int, int]  # bytes sent, bytes received by a machine's interfaces but loopback
THIS_MACHINE = "this machine"  # how messages name the launcher's own machine, however its nodes are named


class HeldRule(Protocol):
    """A packet-filter rule in force while held (`nodes.fence`); `close` removes it."""

    def close(self) -> None: ...


class NodeBackend(ABC):
    """One machine of a job, and how the launcher does the job's work on it."""

    remote: ClassVar[bool]  # its tasks run on another machine: their labels name the host

    def __init__(self) -> None:
        self.nodes: list[Node] = []  # the spec's nodes on this machine, in spec order

    @property
    @abstractmethod
    def name(self) -> str:
        """How results name the machine (its byte counters are reported under this name)."""

    @abstractmethod
    def prepare(self, strategy_file: Path) -> Counters | None:
        """Before an attempt: make `strategy_file` readable at the same path there, and return
        the machine's byte counters now (None when they cannot be read)."""

    @abstractmethod
    def ports(self) -> list[list[int]]:
        """This attempt's ports, per node of `nodes`: `workers + ps` each, free there."""

    @abstractmethod
    def task_env(self, context: TaskContext, launcher_env: Mapping[str, str], node: Node,
                 node_env: Mapping[str, str]) -> dict[str, str]:
        """The environment a task of `node` is started with, from the launcher's and the node's."""

    @abstractmethod
    def workdir(self, node: Node, cwd: str | Path | None) -> Path:
        """Where the tasks of `node` run (`cwd`: the launcher's directory, default the current one)."""

    @abstractmethod
    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, job_id: str, *,
              release: bool = False) -> TaskProcess:
        """Start one task of job `job_id` (OSError or UserError when it cannot be started); with
        `release`, with a release pipe for the finish barrier (`TaskProcess.release`)."""

    @abstractmethod
    def sweep(self, job_id: str) -> list[str]:
        """End every process of job `job_id` left on the machine (by ADRUN_JOB_ID); one line
        per problem that left it unswept."""

    @abstractmethod
    def traffic(self) -> Counters | None:
        """The machine's byte counters now (None when they cannot be read)."""

    @property
    @abstractmethod
    def title(self) -> str:
        """How messages name the machine (a rule that could not be installed, say)."""

    @abstractmethod
    def addresses(self, resolve: Callable[[str], list[str]], here: Callable[[], list[str]]) -> list[str]:
        """The IP addresses the job's other machines see this one's tasks come from: a node's
        address as `resolve` resolves it, or this machine's own interfaces (`here`)."""

    @abstractmethod
    def fence(self, table: str, ports: Sequence[int], peers: Sequence[str], job_id: str) -> HeldRule:
        """Close `ports` there to every host but loopback and `peers` while the returned rule is
        held (FenceError, UserError, ValueError or OSError saying why it cannot be)."""


class LocalNode(NodeBackend):
    """This machine: tasks are the launcher's own subprocesses (`local.LocalProcess`)."""

    remote = False

    def __init__(self, hook_dir: str | Path = HOOK_DIR) -> None:
        super().__init__()
        self.hook_dir = str(hook_dir)

    @property
    def name(self) -> str:
        return ", ".join(node.address for node in self.nodes)

    def prepare(self, strategy_file: Path) -> Counters:
        return self.traffic()

    def ports(self) -> list[list[int]]:
        """Chosen now, for every node on this machine together, so no two tasks share one."""
        return allocate_ports(self.nodes)

    def task_env(self, context: TaskContext, launcher_env: Mapping[str, str], node: Node,
                 node_env: Mapping[str, str]) -> dict[str, str]:
        return task_env(context, launcher_env, hook_dir=self.hook_dir, node_env=node_env)

    def workdir(self, node: Node, cwd: str | Path | None) -> Path:
        return Path(node_workdir(node, local=True, cwd=cwd))

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, job_id: str, *,
              release: bool = False) -> TaskProcess:
        return LocalProcess(argv, cwd=cwd, env=env, release=release)

    def sweep(self, job_id: str) -> list[str]:
        kill_leftovers(job_id)
        return []

    def traffic(self) -> Counters:
        counters = psutil.net_io_counters(pernic=True)
        return (sum(c.bytes_sent for name, c in counters.items() if name != "lo"),
                sum(c.bytes_recv for name, c in counters.items() if name != "lo"))

    @property
    def title(self) -> str:
        return THIS_MACHINE

    def addresses(self, resolve: Callable[[str], list[str]], here: Callable[[], list[str]]) -> list[str]:
        """Its interfaces', not its node names resolved: a host name may resolve to 127.0.1.1 here
        (Debian's /etc/hosts) while its tasks reach other nodes from an interface's address."""
        return here()

    def fence(self, table: str, ports: Sequence[int], peers: Sequence[str], job_id: str) -> HeldRule:
        """Held by an `nft` process of the launcher's: it goes with the launcher however it ends."""
        return Fence(table, ports, peers)


class SshNode(NodeBackend):
    """Another node, over the job's SSH connection to it (`provision.RemoteNodes`): tasks run
    under their keeper (`remote.RemoteProcess`), helpers do the rest (`remote_agent`)."""

    remote = True

    def __init__(self, connections: RemoteNodes, address: str) -> None:
        super().__init__()
        self._connections = connections
        self.address = address
        self._ports: list[list[int]] | None = None

    @property
    def name(self) -> str:
        return self.address

    def prepare(self, strategy_file: Path) -> Counters:
        """Ship the strategy document unless an identical copy is there, to the same path in a
        directory only the node's user may read (refused when someone else owns it), and choose
        (or, with base_port, check) the node's ports on the node itself. A spec names an address
        once, so another machine holds one node."""
        (node,) = self.nodes
        link = self._connections.links[self.address]
        remote = str(strategy_file.resolve())
        found = link.helper("prepare", {"ports": {"base": node.base_port, "count": node.workers + node.ps},
                                        "files": [remote], "private_dir": posixpath.dirname(remote)})
        if found["private_dir"] is not None:
            raise UserError(f"run directory refused on {self.address}: {found['private_dir']}")
        if found["hashes"][remote] != file_sha256(str(strategy_file)):
            link.put(strategy_file, remote)
        if found.get("taken"):
            raise UserError(taken_message(node, found["taken"]))
        self._ports = [found["ports"]]
        return found["net"]["sent"], found["net"]["recv"]

    def ports(self) -> list[list[int]]:
        """Those `prepare` chose on the node for this attempt."""
        if self._ports is None:
            raise UserError(f"node {self.address}: no ports were chosen there before planning the job")
        return self._ports

    def task_env(self, context: TaskContext, launcher_env: Mapping[str, str], node: Node,
                 node_env: Mapping[str, str]) -> dict[str, str]:
        return remote_task_env(context, launcher_env, node.ssh.forward_env if node.ssh is not None else [], node_env)

    def workdir(self, node: Node, cwd: str | Path | None) -> Path:
        return Path(node_workdir(node, local=False, cwd=cwd))

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, job_id: str, *,
              release: bool = False) -> TaskProcess:
        return self._connections.links[self.address].start(argv, env, str(cwd), job_id, release=release)

    def sweep(self, job_id: str) -> list[str]:
        """A connection that died is opened again for the sweep; a node that cannot be swept is
        named, since the keepers' own guarantees then are all that is left."""
        try:
            link = self._connections.links[self.address]
            if not link.alive:
                link = self._connections.reconnect(self.address)
            left = link.helper("sweep", {"job_id": job_id}, timeout=20)["left"]
        except UserError as e:
            return [f"{self.address}: {e}"]
        return [f"{self.address}: processes {left} survived SIGKILL"] if left else []

    def traffic(self) -> Counters | None:
        link = self._connections.links[self.address]
        if not link.alive:
            return None
        net = link.helper("netio", {}, timeout=20)
        return net["sent"], net["recv"]

    @property
    def title(self) -> str:
        return self.address

    def addresses(self, resolve: Callable[[str], list[str]], here: Callable[[], list[str]]) -> list[str]:
        return resolve(self.address)

    def fence(self, table: str, ports: Sequence[int], peers: Sequence[str], job_id: str) -> HeldRule:
        """Held by the agent on a channel of its own (`NodeLink.fence`), pinged as the keepers are."""
        return self._connections.links[self.address].fence(table, ports, peers, job_id)


class JobNodes:
    """The machines of one job, each behind its backend, chosen once per spec node: this machine
    for an address naming it, else the SSH connection `connections` holds to it."""

    def __init__(self, spec: ClusterSpec, connections: RemoteNodes | None = None, *,
                 hook_dir: str | Path = HOOK_DIR) -> None:
        here = LocalNode(hook_dir)
        others: dict[str, SshNode] = {}
        self.of_node: list[NodeBackend] = []  # by spec node position
        for node in spec.nodes:
            backend: NodeBackend
            if is_local_host(node.address):
                backend = here
            elif connections is not None and node.address in connections.links:
                backend = others.setdefault(node.address, SshNode(connections, node.address))
            else:
                raise UserError(f"node {node.address} is not this machine and no SSH connection to it is open")
            backend.nodes.append(node)
            self.of_node.append(backend)
        self.machines: list[NodeBackend] = list(dict.fromkeys(self.of_node))

    def prepare(self, strategy_file: Path) -> dict[str, Counters]:
        """Every machine prepared for an attempt (in parallel); their byte counters now."""
        counters = each(self.machines, lambda machine: machine.prepare(strategy_file))
        return {machine.name: c for machine, c in zip(self.machines, counters, strict=True) if c is not None}

    def ports(self) -> list[list[int]]:
        """This attempt's ports, by spec node position."""
        chosen = {id(machine): iter(machine.ports()) for machine in self.machines}
        return [next(chosen[id(backend)]) for backend in self.of_node]

    def traffic(self) -> dict[str, Counters]:
        """Every reachable machine's byte counters now (in parallel); a machine that cannot be
        read is left out: a missing byte count must not turn a finished job into a failure."""
        counters = each(self.machines, _quietly(lambda machine: machine.traffic()))
        return {machine.name: c for machine, c in zip(self.machines, counters, strict=True) if c is not None}


def sweep(machines: Sequence[NodeBackend], job_id: str) -> list[str]:
    """Every machine swept for job `job_id`'s leftovers (in parallel); the problems of them all."""
    return [problem for problems in each(machines, lambda machine: machine.sweep(job_id)) for problem in problems]


def _quietly(fn: Callable[[T], R]) -> Callable[[T], R | None]:
    def wrapper(item: T) -> R | None:
        try:
            return fn(item)
        except Exception:  # a missing byte count must not turn a finished job into a failure
            return None

    return wrapper


LOCAL_MACHINE = LocalNode()  # the machine of a launch planned without a spec (tests, benches)
