"""Run a shell command on a node, over SSH or (for this machine) as a local subprocess.

Why one interface: `cluster check` runs the same probe commands on every node, and a node
that is this machine is checked without SSH, so the probes must not care which one they got.
Every call has a timeout; nothing is ever read from the user's terminal.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Protocol

from fabric import Connection
from invoke.exceptions import CommandTimedOut


@dataclass(frozen=True)
class Completed:
    """Exit code and output of a finished command (exit code None: killed at its timeout)."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


class NodeShell(Protocol):
    def run(self, command: str, timeout: float) -> Completed:
        """Run `command` with /bin/sh on the node; never raises for a non-zero exit."""
        ...

    def read_clock(self, timeout: float) -> tuple[float, float, float]:
        """(local time before, node time, local time after) around one round trip; raises on failure."""
        ...

    def close(self) -> None: ...


class LocalShell:
    """This machine."""

    def read_clock(self, timeout: float) -> tuple[float, float, float]:
        now = time.time()
        return now, now, now

    def run(self, command: str, timeout: float) -> Completed:
        try:
            proc = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            return Completed(None, _text(e.stdout), _text(e.stderr))
        return Completed(proc.returncode, proc.stdout, proc.stderr)

    def close(self) -> None:
        pass


class SSHShell:
    """A node reached through an open fabric Connection (closed by `close`)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def run(self, command: str, timeout: float) -> Completed:
        try:
            result = self.conn.run(command, hide=True, warn=True, timeout=timeout, in_stream=False, pty=False)
        except CommandTimedOut as e:
            return Completed(None, e.result.stdout, e.result.stderr)
        return Completed(result.exited, result.stdout, result.stderr)

    def read_clock(self, timeout: float) -> tuple[float, float, float]:
        """Ping-pong on one channel: the node says it is ready, we send a newline, it prints its
        clock. Timing only the exchange keeps channel and process start-up out of the skew."""
        channel = self.conn.client.get_transport().open_session(timeout=timeout)
        try:
            channel.settimeout(timeout)
            channel.exec_command("echo ready; read _; date +%s.%N")
            reader = channel.makefile("r")
            if reader.readline().strip() != "ready":
                raise RuntimeError("no answer from the node's shell")
            before = time.time()
            channel.sendall(b"\n")
            remote = float(reader.readline())
            after = time.time()
        finally:
            channel.close()
        return before, remote, after

    def close(self) -> None:
        self.conn.close()


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
