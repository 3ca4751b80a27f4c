"""Tasks on other nodes, started over SSH and kept by `remote_agent.py` on the node.

One SSH connection per node carries every task of that node (one channel each) and the
helper commands (ports, file hashes, byte counters, the final sweep). A `RemoteProcess` is a
`TaskProcess`, as a `LocalProcess` is; signals travel as words on the channel's stdin to the
keeper, which owns the task's process group on the node.

A silent network cut (no FIN, no RST: a link or a switch port down, packets dropped) is noticed
by neither TCP stack for many minutes, so both ends listen for each other instead: a thread here
pings every channel every PING_INTERVAL_S, and each keeper writes a heartbeat on its stderr as
often (remote_agent.HEARTBEAT). A keeper that hears no ping for SILENCE_S ends its task; a node
none of whose channels said anything for SILENCE_S is cut off, and its tasks are reported lost,
naming the node. The numbers come from heartbeat gaps measured on a loaded 2-core machine
(bench/heartbeat_gaps.py, docs/multi-node.md "Teardown guarantees").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import paramiko
from fabric import Connection

from adrun.env_vars import RELEASE_FD_VAR
from adrun.errors import UserError
from adrun.spec import Node

from . import remote_agent
from .process import OutputLines, TaskProcess
from ..nodes.command import node_command, node_python, shipped_source
from ..nodes.shell import SSHShell
from ..nodes.ssh import explain_failure, open_connection

AGENT_SOURCE = shipped_source(remote_agent)
HELPER_TIMEOUT = 60.0
PING_INTERVAL_S = 1.0  # also the keepers' heartbeat interval
SILENCE_S = 6.0  # either end that hears nothing from the other for this long gives it up
START_SILENCE_S = 30.0  # ... but a node's first keeper may take this long to say anything (sshd, Python start)
_CHUNK = 1 << 16
LOST_CONNECTION = 255  # returncode of a task whose keeper never reported (as ssh(1) exits then)


def agent_command(node: Node, mode: str, args: Mapping[str, Any] | None = None, *,
                  workdir: str | None = None, job_id: str | None = None) -> str:
    """The shell command running the agent in `mode` on `node` (`node_command`); `job_id` tags
    the agent's environment, so the job's sweep finds it too."""
    return node_command(node, AGENT_SOURCE, mode, args, local=False, workdir=workdir,
                        env={"ADRUN_JOB_ID": job_id} if job_id is not None else None)


class NodeLink:
    """The open connection to one remote node, and what the job does through it."""

    def __init__(self, node: Node, conn: Connection) -> None:
        self.node = node
        self.conn = conn
        self.processes: list[RemoteProcess] = []
        self.fences: list[RemoteFence] = []
        self.hearing = Hearing()
        self._closed = threading.Event()
        self._pinger = threading.Thread(target=self._ping, daemon=True)
        self._pinger.start()

    @classmethod
    def open(cls, node: Node) -> NodeLink:
        """Connect as the spec says; UserError with the reason and remedy when that fails."""
        try:
            conn = open_connection(node)
        except Exception as e:
            why = explain_failure(e, node)
            raise UserError(f"{why.message}: {why.remedy}") from e
        conn.client.get_transport().set_keepalive(int(PING_INTERVAL_S * 5))
        return cls(node, conn)

    @property
    def address(self) -> str:
        return self.node.address

    @property
    def python(self) -> str:
        return node_python(self.node)

    @property
    def alive(self) -> bool:
        """The connection works as far as we know: open, and the node not silent (a cut link
        leaves the transport open, and a command on it would wait for its timeout)."""
        transport = self.conn.client.get_transport()
        return transport is not None and transport.is_active() and self.hearing.silent_s() is None

    def helper(self, mode: str, args: Mapping[str, Any], timeout: float = HELPER_TIMEOUT) -> dict[str, Any]:
        """Run an agent probe (`prepare`, `netio`, `sweep`) and return its result; UserError if it fails."""
        done = SSHShell(self.conn).run(agent_command(self.node, mode, args), timeout)
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

    def start(self, argv: Sequence[str], env: Mapping[str, str], workdir: str, job_id: str, *,
              release: bool = False) -> RemoteProcess:
        """Start a task under its keeper on a new channel; the task's env travels on stdin, off
        `ps` (the command line holds only what `node_command` puts there). With `release`, the
        keeper gives the task a release pipe, named by the variable it is told (`RemoteProcess.release`)."""
        spec = {"argv": list(argv), "env": dict(env), "lease_s": SILENCE_S, "beat_s": PING_INTERVAL_S}
        if release:
            spec["release_var"] = RELEASE_FD_VAR
        try:
            channel = self.conn.client.get_transport().open_session(timeout=HELPER_TIMEOUT)
            channel.exec_command(agent_command(self.node, "run", workdir=workdir, job_id=job_id))
            channel.sendall((json.dumps(spec) + "\n").encode())
        except (paramiko.SSHException, OSError) as e:
            raise UserError(f"cannot start a task on {self.address} over SSH: {e} (one channel per task: "
                            "sshd's MaxSessions, 10 by default, bounds the tasks per node)") from e
        self.hearing.expect()
        proc = RemoteProcess(self.address, channel, self.hearing)
        # the pinger keeps every live task's lease; tasks of an earlier attempt are over
        self.processes = [p for p in self.processes if p.group_alive()] + [proc]
        return proc

    def fence(self, table: str, ports: Sequence[int], peers: Sequence[str], job_id: str) -> RemoteFence:
        """Install the job's packet-filter rule on this node (`nodes.fence`), held by the agent's
        `fence` mode on a channel of its own and pinged as the keepers are, so it goes when the
        launcher or the link does; UserError saying why when it cannot be installed."""
        args = {"table": table, "ports": list(ports), "peers": list(peers), "lease_s": SILENCE_S}
        try:
            channel = self.conn.client.get_transport().open_session(timeout=HELPER_TIMEOUT)
            channel.exec_command(agent_command(self.node, "fence", args, job_id=job_id))
        except (paramiko.SSHException, OSError) as e:
            raise UserError(f"cannot open an SSH channel to {self.address}: {e}") from e
        answer = _first_marker(channel, HELPER_TIMEOUT)
        if answer is None or "error" in answer:
            channel.close()
            raise UserError(answer["error"] if answer else f"no answer from adrun's helper on {self.address}")
        fence = RemoteFence(channel)
        self.fences = [f for f in self.fences if f.alive] + [fence]
        return fence

    def _ping(self) -> None:
        while not self._closed.wait(PING_INTERVAL_S):
            for process in self.processes:
                process.send("PING")
            for fence in self.fences:
                fence.send("PING")

    def close(self) -> None:
        self._closed.set()
        self.conn.close()


class RemoteFence:
    """A node's rule for the job, held by the agent on `channel`: closing the channel ends the
    agent, and with it the rule."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel

    @property
    def alive(self) -> bool:
        return not self._channel.exit_status_ready() and not self._channel.closed

    def send(self, word: str) -> None:
        try:
            self._channel.sendall((word + "\n").encode())
        except Exception:  # a closed channel: the agent is gone, and the rule with it
            pass

    def close(self) -> None:
        self._channel.close()


def _first_marker(channel: paramiko.Channel, timeout: float) -> dict[str, Any] | None:
    """The agent's first `MARKER {json}` line on `channel`'s stdout, read for at most `timeout`
    seconds; None when the channel ends or the time runs out without one."""
    channel.settimeout(0.5)
    pending = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = channel.recv(_CHUNK)
        except TimeoutError:
            continue
        if not chunk:
            return None
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            text = line.decode("utf-8", errors="replace")
            if text.startswith(remote_agent.MARKER):
                return json.loads(text[len(remote_agent.MARKER):])
    return None


class Hearing:
    """When the launcher last heard from one node: any bytes on the stderr of any of its task
    channels, which the keepers' heartbeats keep coming. One per node, so that all its tasks are
    lost together; once silent, it stays silent (the job has been failed by then)."""

    def __init__(self) -> None:
        self._since: float | None = None  # when the first task started: the clock runs from then
        self._last: float | None = None
        self._silent_s: float | None = None

    def expect(self) -> None:
        """A task is starting on the node: from now on it must be heard from."""
        if self._since is None:
            self._since = time.monotonic()

    def heard(self) -> None:
        self._last = time.monotonic()

    def silent_s(self) -> float | None:
        """Seconds the node has been silent for, once that is longer than allowed; else None."""
        if self._silent_s is None and self._since is not None:
            quiet = time.monotonic() - (self._last if self._last is not None else self._since)
            if quiet > (SILENCE_S if self._last is not None else START_SILENCE_S):
                self._silent_s = quiet
        return self._silent_s


class RemoteProcess(TaskProcess):
    """A task on a remote node, signalled through its keeper."""

    def __init__(self, host: str, channel: paramiko.Channel, hearing: Hearing) -> None:
        self.host = host
        self._channel = channel
        self._hearing = hearing
        self._remote_pid = 0
        self._returncode: int | None = None
        self._stderr_done = threading.Event()
        self._stdout = channel.makefile("rb")
        self._stderr = _Markers(channel, self)

    @property
    def pid(self) -> int:
        """The task's pid on its node (0 until the keeper reported it)."""
        return self._remote_pid

    @property
    def stdout(self) -> OutputLines:
        return self._stdout

    @property
    def stderr(self) -> OutputLines:
        return self._stderr

    @property
    def lost(self) -> str | None:
        """How the task was lost, when it was: its node fell silent (a network cut), or the
        channel ended with neither a keeper report nor an exit status (the SSH connection, the
        sshd session or the keeper itself died). None otherwise."""
        if self._returncode is not None:
            return None
        silent = self._hearing.silent_s()
        if silent is not None:
            return f"heard nothing from {self.host} for {silent:.0f} s (a network cut, or the node is down)"
        if self._channel.exit_status_ready() and self._channel.exit_status <= 0:
            return f"lost the SSH connection to {self.host}"
        return None

    def poll(self) -> int | None:
        """The task's exit status (negative: killed by that signal), as its keeper reported it;
        LOST_CONNECTION when the channel ended without a report or the node fell silent."""
        if self._returncode is not None:
            return self._returncode
        if self._channel.exit_status_ready() and self._stderr_done.is_set():
            status = self._channel.exit_status
            return status if status > 0 else LOST_CONNECTION
        if self._hearing.silent_s() is not None:
            return LOST_CONNECTION
        return None

    def send(self, word: str) -> None:
        try:
            self._channel.sendall((word + "\n").encode())
        except Exception:  # a closed channel (OSError, EOFError): nothing left to tell
            pass

    def release(self) -> None:
        """The keeper writes the line on the task's release pipe (a no-op for a task without one)."""
        self.send("RELEASE")

    def terminate_group(self) -> None:
        self.send("TERM")

    def kill_group(self) -> None:
        self.send("KILL")

    def group_alive(self) -> bool:
        """Whether the keeper still runs: it exits once the task's group is empty. Unknowable
        from here once the node is silent: False then, as waiting would not tell (the keeper ends
        its task on its own when our pings stop)."""
        return not self._channel.exit_status_ready() and self._hearing.silent_s() is None

    def _task_part(self, line: bytes) -> bytes:
        """A stderr line without the keeper's marker, which sets the status instead. The marker
        ends the line: the keeper writes it after whatever the task left unfinished."""
        for marker, key in ((remote_agent.EXIT_MARKER, "returncode"), (remote_agent.STARTED_MARKER, "pid")):
            task_part, found, payload = line.partition(marker.encode())
            if not found:
                continue
            try:
                value = int(json.loads(payload)[key])
            except (ValueError, TypeError, KeyError):  # the task's own text, which happens to look alike
                continue
            if key == "returncode":
                self._returncode = value
            else:
                self._remote_pid = value
            return task_part
        return line


class _Markers:
    """The task's stderr as lines, without the keeper's markers (which set the status instead)
    and heartbeats (which only say the node is there). Read in chunks, not lines: a
    heartbeat may sit in a line the task has not finished yet, and must count at once."""

    def __init__(self, channel: paramiko.Channel, proc: RemoteProcess) -> None:
        self._channel = channel
        self._proc = proc

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        try:
            while chunk := self._channel.recv_stderr(_CHUNK):
                self._proc._hearing.heard()
                # A heartbeat is never split by a newline, so one cut in two by the chunking is
                # whole again in `pending`, the part after the last newline.
                *lines, pending = (pending + chunk).replace(remote_agent.HEARTBEAT, b"").split(b"\n")
                for line in lines:
                    if not line:
                        yield b"\n"  # the task's own empty line
                    elif task_part := self._proc._task_part(line):
                        yield task_part + b"\n"
            if pending and (task_part := self._proc._task_part(pending)):
                yield task_part
        finally:
            self._proc._stderr_done.set()

    def __enter__(self) -> _Markers:
        return self

    def __exit__(self, *exc: object) -> None:
        pass
