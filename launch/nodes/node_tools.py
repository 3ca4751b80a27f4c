"""Ports and file hashes as a node sees them: the one implementation the launcher and the node
programs share.

Why standard library only: `probe.py` and `remote_agent.py` run on nodes with nothing but the
node's Python, and carry this module's source with them (`command.shipped_source`); the launcher
imports it as a plain module for this machine (`adrun.launch.job.ports`, `provision`). So a port
counts as free by the same test here and on every node, and a file has one digest everywhere.
"""

from __future__ import annotations

import hashlib
import os
import socket

CHUNK = 1 << 16


def bind_as_grpc(port: int) -> socket.socket:
    """A listening socket on `port` of every interface (0: a port the kernel chooses); raises OSError.

    Bound the way TF's gRPC server binds: on all interfaces, since a port taken on any address
    makes the server fail at start-up; with SO_REUSEADDR for a fixed port, as gRPC sets it, so a
    port left in TIME_WAIT by an earlier job still counts as free. Listening makes the claim
    exclusive even against other SO_REUSEADDR sockets.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def taken_ports(ports: list[int]) -> list[int]:
    """Those of `ports` that `bind_as_grpc` cannot bind now (each released again at once)."""
    taken = []
    for port in ports:
        try:
            bind_as_grpc(port).close()
        except OSError:
            taken.append(port)
    return taken


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel reports free, all held until all are chosen."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            held.append(bind_as_grpc(0))
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def file_sha256(path: str) -> str | None:
    """The file's sha256 as hex, read in chunks; None when there is no such file."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()
