"""Ports for tests that start TensorFlow servers themselves (without adrun's launcher)."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free at the time of the call: all held open together, so no
    two are the same, then released for the test's servers to bind."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
