"""TCP ports for the tasks of a job on this machine (other nodes: `backends.SshNode`).

Ports are tested as every node tests them (`node_tools.bind_as_grpc`: the wildcard address, as
TF's gRPC servers listen): a port taken on any address would make the server fail at start-up,
long after the launcher could have said why. All probe sockets stay open until every port is
chosen, so the ports handed out are distinct from each other; a kernel-chosen port another of this
user's launchers handed out moments ago (its server may not listen yet) is passed over
(`port_leases`).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from contextlib import ExitStack

import psutil

from adrun.errors import UserError
from adrun.spec import Node

from ..nodes.node_tools import bind_as_grpc
from .port_leases import PortLeases

OFFERS = 64  # kernel-chosen ports a launcher looks at for one task before giving up


def allocate_ports(nodes: Sequence[Node]) -> list[list[int]]:
    """Ports for `nodes`, all on this machine, in order: `node.workers + node.ps` ports each.

    A node with `base_port` gets `base_port, base_port+1, ...`, each checked to be free; other
    nodes get ports the kernel reports free and no other launcher of this user's was just given.
    Fixed ranges are claimed first so a kernel-chosen port can never land in one of them. Every
    port handed out is leased (`port_leases`).
    """
    result: list[list[int]] = [[] for _ in nodes]
    with ExitStack() as held, PortLeases() as leases:
        taken: set[int] = set()
        for pos, node in enumerate(nodes):
            if node.base_port is None:
                continue
            # The spec guarantees the range ends at or below 65535.
            for port in range(node.base_port, node.base_port + node.workers + node.ps):
                if port in taken:
                    raise UserError(
                        f"port {port} on {node.address} would be used by two tasks: give the nodes on this "
                        "machine base_port ranges that do not overlap"
                    )
                held.enter_context(_claim(node.address, port))
                leases.take(port)  # the spec's choice: free now, whatever a lease says
                taken.add(port)
                result[pos].append(port)
        for pos, node in enumerate(nodes):
            if node.base_port is None:
                for _ in range(node.workers + node.ps):
                    result[pos].append(_unleased(node.address, held, leases))
    return result


def _unleased(host: str, held: ExitStack, leases: PortLeases) -> int:
    """A port the kernel chooses that `leases` lets this launcher take; each port offered stays
    held, so the kernel offers another next."""
    for _ in range(OFFERS):
        port: int = held.enter_context(_claim(host, 0)).getsockname()[1]
        if leases.take(port):
            return port
    raise UserError(f"no free TCP port on {host}: the last {OFFERS} the system offered were just given to other "
                    "adrun jobs")


def _claim(host: str, port: int) -> socket.socket:
    """A listening socket on `port` (0 = any free port); UserError naming the holder if taken."""
    try:
        return bind_as_grpc(port)
    except OSError as e:
        if not port:
            raise UserError(f"no free TCP port on {host}: {e.strerror}") from e
        raise UserError(_in_use_message(host, port)) from e


def _in_use_message(host: str, port: int) -> str:
    holder = _holder(port)
    who = f" (pid {holder[0]}, {holder[1]})" if holder else ""
    return f"port {port} on {host} is already in use{who}: choose another base_port in the spec or stop that process"


def _holder(port: int) -> tuple[int, str] | None:
    """(pid, name) of the process using local `port`, listeners first, when the OS lets us see it."""
    try:
        connections = psutil.net_connections(kind="inet")
    except psutil.AccessDenied:
        return None
    users = [c for c in connections if c.laddr and c.laddr.port == port]
    users.sort(key=lambda c: c.status != psutil.CONN_LISTEN)
    for pid in (c.pid for c in users if c.pid):
        try:
            return pid, psutil.Process(pid).name()
        except psutil.Error:
            continue
    return None
