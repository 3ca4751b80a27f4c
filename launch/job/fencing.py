"""Closing one attempt's TF ports to every host outside the job, on every machine of the job.

Which rule each machine gets is decided here (`fence_plan`, pure); each machine's backend holds
it (`NodeBackend.fence`, with `nodes/fence.py`): this machine's in the launcher, every other
node's in its SSH agent. A machine whose rule cannot be installed (not root, no nftables) is named in
`JobFences.problems` with the reason, and the job runs exposed there, after a warning; with
`allow_exposed` nothing is installed and nothing said (the user's knowing choice).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

from adrun.errors import UserError

from ..nodes.fence import FenceError, table_name
from .backends import HeldRule, NodeBackend
from ..nodes.parallel import each
from .plan import TaskLaunch

ALLOW_EXPOSED_HINT = "pass --allow-exposed to run so knowingly, without this warning"


@dataclass(frozen=True)
class MachineRule:
    """The rule one machine of the job gets: its task ports refuse all but loopback and `peers`."""

    host: str  # the machine's `title`: a node's address, or backends.THIS_MACHINE for the launcher's own
    ports: list[int]
    peers: list[str]  # IP addresses of the job's other machines


def resolve(address: str) -> list[str]:
    """Every IP address `address` names, as this machine resolves it; [] when it does not."""
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)})
    except OSError:
        return []


def local_addresses() -> list[str]:
    """This machine's own addresses but loopback and link-local: the ones its tasks may connect
    to other nodes from (a node name in the spec may resolve to 127.0.1.1 here, as Debian's
    /etc/hosts maps the host name, while its tasks reach other nodes from an interface's address)."""
    found = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = ipaddress.ip_address(address.address.split("%", 1)[0])
            if not (ip.is_loopback or ip.is_link_local):
                found.add(str(ip))
    return sorted(found)


def machines_of(launches: Sequence[TaskLaunch]) -> list[NodeBackend]:
    """The machines `launches` start on, in the order their first task appears."""
    return list(dict.fromkeys(launch.node for launch in launches))


def fence_plan(launches: Sequence[TaskLaunch], resolver: Callable[[str], list[str]] = resolve,
               here: Callable[[], list[str]] = local_addresses) -> list[MachineRule]:
    """One rule per machine (`machines_of`), for the ports of its tasks. A machine's peers are the
    addresses of the job's other machines (`NodeBackend.addresses`: another node's as this
    machine resolves its spec address, this machine's its own interfaces'), asked only when there
    are other machines (a job on one machine has no peers: only loopback reaches its ports)."""
    machines = machines_of(launches)
    ports: dict[NodeBackend, list[int]] = {machine: [] for machine in machines}
    for launch in launches:
        ports[launch.node].append(launch.task.port)
    addresses = {machine: machine.addresses(resolver, here) for machine in machines} if len(machines) > 1 else {}
    rules = []
    for machine in machines:
        own = set(addresses.get(machine, []))
        peers = {ip for other, ips in addresses.items() if other is not machine for ip in ips}
        rules.append(MachineRule(machine.title, sorted(ports[machine]), sorted(peers - own)))
    return rules


@dataclass
class JobFences:
    """The rules held for one attempt; `close` removes them all."""

    held: list[HeldRule] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "HOST: why", one per machine left open

    def close(self) -> None:
        for rule in self.held:
            rule.close()
        self.held.clear()

    def warning(self) -> str | None:
        """What the user must hear before the job starts when some machine is left open."""
        if not self.problems:
            return None
        return ("the job's TensorFlow servers accept connections from any host that can reach them, and run "
                "whatever graph they are sent, on " + "; ".join(self.problems) +
                ". Run adrun as root with nftables installed (apt-get install nftables), keep the nodes on a "
                f"network of their own, or {ALLOW_EXPOSED_HINT}")


def close_ports(launches: Sequence[TaskLaunch], job_id: str, attempt: int) -> JobFences:
    """Install every machine's rule for attempt `attempt` of `job_id` (in parallel, each held by
    its machine's backend) and return them held; a machine whose rule fails is in `problems`,
    the others hold theirs."""
    table = table_name(job_id, attempt)

    def install(machine_rule: tuple[NodeBackend, MachineRule]) -> HeldRule | str:
        machine, rule = machine_rule
        try:
            return machine.fence(table, rule.ports, rule.peers, job_id)
        except (FenceError, UserError, ValueError) as e:
            return f"{rule.host} ({e})"
        except OSError as e:
            return f"{rule.host} (nft cannot be started: {e.strerror or e})"

    outcomes = each(list(zip(machines_of(launches), fence_plan(launches), strict=True)), install)
    fences = JobFences()
    for outcome in outcomes:
        if isinstance(outcome, str):
            fences.problems.append(outcome)
        else:
            fences.held.append(outcome)
    return fences
