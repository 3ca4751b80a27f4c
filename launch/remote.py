"""Tasks on other nodes, started over SSH and kept by `remote_agent.py` on the node.

One SSH connection per node carries every task of that node (one channel each) and the
helper commands (ports, file hashes, byte counters, the final sweep). A `RemoteProcess` has the
interface the supervisor and teardown use for a `LocalProcess`; signals travel as words on the
channel's stdin to the keeper, which owns the task's process group on the node. A thread pings
every channel, so a keeper whose launcher went silent ends its task (see remote_agent).
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import paramiko
from fabric import Connection

from adrun.errors import UserError

from . import remote_agent
from .node_shell import SSHShell
from .ssh import explain_failure, open_connection

AGENT_SOURCE = Path(remote_agent.__file__).read_text()
HELPER_TIMEOUT = 60.0
PING_INTERVAL_S = 2.0
LEASE_S = 30.0  # a keeper that hears nothing for this long stops its task
LOST_CONNECTION = 255  # returncode of a task whose keeper never reported (as ssh(1) exits then)


def agent_command(node: Any, python: str, mode: str, args: Mapping[str, Any] | None = None, *,
                  workdir: str | None = None, job_id: str | None = None) -> str:
    """The shell command running the agent in `mode` on `node`: every value shell-quoted.

    `cd` comes first (a missing workdir fails right there, by name), then `ssh.activate`, then
    the agent with `exec`, so the agent is the sshd session's own child. `job_id` tags the
    agent's environment, so the job's sweep finds it too.
    """
    steps = []
    if workdir is not None:
        steps.append(f"cd {shlex.quote(workdir)}")
    if node.ssh is not None and node.ssh.activate:
        steps.append(node.ssh.activate)
    tag = f"env ADRUN_JOB_ID={shlex.quote(job_id)} " if job_id is not None else ""
    payload = f" {shlex.quote(json.dumps(dict(args)))}" if args is not None else ""
    steps.append(f"exec {tag}{shlex.quote(python)} -u -c {shlex.quote(AGENT_SOURCE)} {mode}{payload}")
    return " && ".join(steps)


class NodeLink:
    """The open connection to one remote node, and what the job does through it."""

    def __init__(self, node: Any, python: str, conn: Connection) -> None:
        self.node = node
        self.python = python
        self.conn = conn
        self.processes: list[RemoteProcess] = []
        self._closed = threading.Event()
        self._pinger = threading.Thread(target=self._ping, daemon=True)
        self._pinger.start()

    @classmethod
    def open(cls, node: Any, python: str) -> NodeLink:
        """Connect as the spec says; UserError with the reason and remedy when that fails."""
        try:
            conn = open_connection(node)
        except Exception as e:
            why = explain_failure(e, node)
            raise UserError(f"{why.message}: {why.remedy}") from e
        conn.client.get_transport().set_keepalive(int(PING_INTERVAL_S * 5))
        return cls(node, python, conn)

    @property
    def address(self) -> str:
        return self.node.address

    @property
    def alive(self) -> bool:
        transport = self.conn.client.get_transport()
        return transport is not None and transport.is_active()

    def helper(self, mode: str, args: Mapping[str, Any], timeout: float = HELPER_TIMEOUT) -> dict[str, Any]:
        """Run an agent probe (`prepare`, `netio`, `sweep`) and return its result; UserError if it fails."""
        done = SSHShell(self.conn).run(agent_command(self.node, self.python, mode, args), timeout)
        for line in reversed(done.stdout.splitlines()):
            if line.startswith(remote_agent.MARKER):
                result = json.loads(line[len(remote_agent.MARKER):])
                if "error" not in result:
                    return result
                raise UserError(f"adrun's helper failed on {self.address}: {result['error']}")
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"cannot run {self.python} on {self.address}: {last} "
                        "(check nodes[].python and ssh.activate with `adrun cluster check`)")

    def put(self, local: Path, remote: str) -> None:
        """Copy a file through SFTP: to a temporary name, then renamed, so a reader (or the
        same file on a shared file system) never sees it half written."""
        sftp = self.conn.sftp()
        parts = remote.rsplit("/", 1)[0].split("/")
        for i in range(2, len(parts) + 1):
            path = "/".join(parts[:i])
            try:
                sftp.stat(path)
            except FileNotFoundError:
                sftp.mkdir(path)
        temporary = f"{remote}.adrun-part"
        sftp.put(str(local), temporary)
        sftp.chmod(temporary, local.stat().st_mode & 0o777)
        sftp.posix_rename(temporary, remote)

    def start(self, argv: Sequence[str], env: Mapping[str, str], workdir: str, job_id: str) -> RemoteProcess:
        """Start a task under its keeper on a new channel; the env travels on stdin, off `ps`."""
        try:
            channel = self.conn.client.get_transport().open_session(timeout=HELPER_TIMEOUT)
            channel.exec_command(agent_command(self.node, self.python, "run", workdir=workdir, job_id=job_id))
            channel.sendall((json.dumps({"argv": list(argv), "env": dict(env), "lease_s": LEASE_S}) + "\n").encode())
        except (paramiko.SSHException, OSError) as e:
            raise UserError(f"cannot start a task on {self.address} over SSH: {e} (one channel per task: "
                            "sshd's MaxSessions, 10 by default, bounds the tasks per node)") from e
        proc = RemoteProcess(self.address, channel)
        # the pinger keeps every live task's lease; tasks of an earlier attempt are over
        self.processes = [p for p in self.processes if p.group_alive()] + [proc]
        return proc

    def _ping(self) -> None:
        while not self._closed.wait(PING_INTERVAL_S):
            for proc in list(self.processes):
                proc.send("PING")

    def close(self) -> None:
        self._closed.set()
        self.conn.close()


class RemoteProcess:
    """A task on a remote node, as the supervisor sees a LocalProcess."""

    def __init__(self, host: str, channel: Any) -> None:
        self.host = host
        self._channel = channel
        self._remote_pid = 0
        self._returncode: int | None = None
        self._stderr_done = threading.Event()
        self._stdout = channel.makefile("rb")
        self._stderr = _Markers(channel.makefile_stderr("rb"), self)

    @property
    def pid(self) -> int:
        """The task's pid on its node (0 until the keeper reported it)."""
        return self._remote_pid

    @property
    def stdout(self) -> IO[bytes]:
        return self._stdout

    @property
    def stderr(self) -> IO[bytes]:
        return self._stderr  # type: ignore[return-value]

    @property
    def lost(self) -> bool:
        """The channel ended with neither a keeper report nor an exit status: the SSH
        connection, the sshd session or the keeper itself died."""
        return (self._returncode is None and self._channel.exit_status_ready()
                and self._channel.exit_status <= 0)

    def poll(self) -> int | None:
        """The task's exit status (negative: killed by that signal), as its keeper reported it;
        LOST_CONNECTION when the channel ended without a report."""
        if self._returncode is not None:
            return self._returncode
        if self._channel.exit_status_ready() and self._stderr_done.is_set():
            status = self._channel.exit_status
            return status if status > 0 else LOST_CONNECTION
        return None

    def send(self, word: str) -> None:
        try:
            self._channel.sendall((word + "\n").encode())
        except Exception:  # a closed channel (OSError, EOFError): nothing left to tell
            pass

    def terminate_group(self) -> None:
        self.send("TERM")

    def kill_group(self) -> None:
        self.send("KILL")

    def group_alive(self) -> bool:
        """Whether the keeper still runs: it exits once the task's group is empty."""
        return not self._channel.exit_status_ready()

    def _marker(self, line: bytes) -> bool:
        """Take a keeper marker line off the task's stderr; False for any other line."""
        for marker in (remote_agent.EXIT_MARKER, remote_agent.STARTED_MARKER):
            if line.startswith(marker.encode()):
                payload = json.loads(line[len(marker):])
                if marker == remote_agent.EXIT_MARKER:
                    self._returncode = int(payload["returncode"])
                else:
                    self._remote_pid = int(payload["pid"])
                return True
        return False


class _Markers:
    """The task's stderr without the keeper's marker lines (which set the status instead)."""

    def __init__(self, raw: Any, proc: RemoteProcess) -> None:
        self._raw = raw
        self._proc = proc

    def __iter__(self) -> Iterator[bytes]:
        try:
            for line in self._raw:
                if not self._proc._marker(line):
                    yield line
        finally:
            self._proc._stderr_done.set()

    def __enter__(self) -> _Markers:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()
