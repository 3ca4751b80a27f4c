"""Whether a spec's address names this machine.

Every part that reaches a node asks this first: cluster check (no SSH to itself), the network
facts (a local shell), the job (a local subprocess instead of a task over SSH) and `adrun stop`.
"""

from __future__ import annotations

import socket

import psutil


def is_local_host(address: str) -> bool:
    """Whether `address` names this machine (loopback, hostname, or one of its interface IPs)."""
    if address in ("localhost", socket.gethostname()):
        return True
    try:
        ip = socket.gethostbyname(address)
    except OSError:
        return False
    own = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    return ip.startswith("127.") or ip in own
