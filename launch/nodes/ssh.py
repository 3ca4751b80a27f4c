"""Open an SSH connection to a node exactly as its spec says, and explain why one failed.

Why fabric/paramiko rather than the `ssh` binary: no prompt can ever appear (paramiko never
asks for a password or a host-key confirmation), every failure arrives as a typed exception
that can be turned into a one-line remedy, and one connection serves many commands.

Host-key policy (`ssh.host_key_policy`):
  strict      the key must already be in ~/.ssh/known_hosts or in the `known_hosts` file given
  accept-new  a host never seen is accepted (kept in memory only, no file is written);
              a known host whose key changed is still refused
  off         no check at all
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from fabric import Connection

from adrun.spec import Node

CONNECT_TIMEOUT = 10.0

_POLICIES: dict[str, type[paramiko.MissingHostKeyPolicy]] = {
    "strict": paramiko.RejectPolicy,
    "accept-new": paramiko.AutoAddPolicy,
    "off": paramiko.WarningPolicy,
}


def open_connection(node: Node, *, known_hosts: str | Path | None = None,
                    timeout: float = CONNECT_TIMEOUT) -> Connection:
    """A connected fabric Connection to `node`; raises paramiko/socket errors.

    With `identity_file` set, only that key is offered: falling back to other keys or an agent
    would hide a wrong `identity_file` until the day those keys are gone. Host keys are read
    from ~/.ssh/known_hosts, the node's `ssh.known_hosts` and `known_hosts` (read-only).
    """
    ssh = node.ssh
    connect_kwargs: dict[str, Any] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if ssh is not None and ssh.identity_file:
        connect_kwargs |= {"key_filename": [str(Path(ssh.identity_file).expanduser())],
                           "look_for_keys": False, "allow_agent": False}
    conn = Connection(
        node.address,
        user=ssh.user if ssh is not None else None,
        port=ssh.port if ssh is not None else 22,
        connect_timeout=max(1, round(timeout)),
        connect_kwargs=connect_kwargs,
    )
    policy = ssh.host_key_policy if ssh is not None else "strict"
    conn.client.set_missing_host_key_policy(_POLICIES[policy]())
    if policy != "off":
        conn.client.load_system_host_keys()  # ~/.ssh/known_hosts when it exists
        for extra in (known_hosts, ssh.known_hosts if ssh is not None else None):
            if extra is not None:
                conn.client.load_system_host_keys(str(Path(extra).expanduser()))  # read-only: never written back
    try:
        conn.open()
    except BaseException:
        conn.client.close()  # Connection.close() skips a transport that never finished connecting
        raise
    return conn


@dataclass(frozen=True)
class SSHFailure:
    """Why a connection failed: which check it belongs to, what happened, what to do."""

    check: str  # "ssh" (reachability/auth) or "host_key"
    message: str
    remedy: str


def explain_failure(error: BaseException, node: Node, *, known_hosts: str | Path | None = None) -> SSHFailure:
    """Turn an exception of `open_connection` into a message and a one-line remedy."""
    ssh = node.ssh
    port = ssh.port if ssh is not None else 22
    user = (ssh.user if ssh is not None else None) or "the current user"
    where = f"{node.address}:{port}"
    known_hosts = known_hosts if known_hosts is not None else (ssh.known_hosts if ssh is not None else None)
    hosts_file = str(known_hosts) if known_hosts is not None else "~/.ssh/known_hosts"
    scan = f"ssh-keyscan -p {port} {node.address}"
    if isinstance(error, paramiko.BadHostKeyException):
        return SSHFailure(
            "host_key", f"host key of {where} differs from the one in {hosts_file}",
            f"if the node was reinstalled, replace its line in {hosts_file} (`{scan}`, compare the "
            "fingerprint); otherwise do not connect: someone may be in between",
        )
    if isinstance(error, paramiko.SSHException) and "not found in known_hosts" in str(error):
        return SSHFailure(
            "host_key", f"host key of {where} is not in {hosts_file}",
            f"add it after checking its fingerprint (`{scan} >> {hosts_file}`) or set "
            "ssh.host_key_policy: accept-new",
        )
    if isinstance(error, paramiko.AuthenticationException):
        key = (ssh.identity_file if ssh is not None else None) or "your default keys"
        return SSHFailure(
            "ssh", f"{where} refused {key} for {user}",
            f"append the public key of {key} to ~/.ssh/authorized_keys of {user} on {node.address}, "
            "or set ssh.user / ssh.identity_file to a key it accepts",
        )
    if isinstance(error, (paramiko.ssh_exception.NoValidConnectionsError, ConnectionRefusedError)):
        return SSHFailure(
            "ssh", f"nothing accepts SSH connections on {where} (connection refused)",
            f"start sshd on {node.address} or set ssh.port to the port it listens on",
        )
    if isinstance(error, (socket.timeout, TimeoutError)):
        return SSHFailure(
            "ssh", f"no answer from {where} within {CONNECT_TIMEOUT:.0f} s",
            f"check that {node.address} is up and that a firewall lets port {port} through",
        )
    if isinstance(error, socket.gaierror):
        return SSHFailure("ssh", f"cannot resolve {node.address}: {error.strerror}",
                          "fix the address in the spec or add the name to DNS / /etc/hosts")
    if isinstance(error, FileNotFoundError):
        return SSHFailure("ssh", f"file not found: {error.filename}",
                          "fix ssh.identity_file or the known_hosts path")
    return SSHFailure("ssh", f"SSH to {where} failed: {type(error).__name__}: {error}",
                      f"try `ssh -p {port} {node.address} true` by hand to see why")
