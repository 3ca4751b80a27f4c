"""Run a shell command on a node, over SSH or (for this machine) as a local subprocess: to its end
(`run`), or left running and spoken to through its input and output (`start`).

Why one interface: `cluster check` runs the same probe commands on every node, and a node
that is this machine is checked without SSH, so the probes must not care which one they got.
Every call has a timeout; nothing is ever read from the user's terminal.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut

CHUNK = 1 << 16
STOP_POLL_S = 0.01  # how often `SSHStarted.stop` looks whether the command exited


@dataclass(frozen=True)
class Completed:
    """Exit code and output of a finished command (exit code None: killed at its timeout)."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


class Started(Protocol):
    """A command left running on a node (`NodeShell.start`); its standard error kept apart."""

    def write(self, data: bytes) -> None:
        """Send `data` to its input; raises OSError when it can take none."""
        ...

    def read(self, timeout: float) -> bytes:
        """What its output has now, waiting at most `timeout` seconds for some; b"" once its output
        ended; raises TimeoutError."""
        ...

    def errors(self) -> str:
        """What it wrote to its standard error so far, without waiting."""
        ...

    def stop(self, timeout: float) -> None:
        """End its input and wait at most `timeout` seconds for it to exit; then end it by force
        where this side can (a local process is killed; over SSH the channel is closed, which
        leaves a command that ignores its input to its own bounds). Never raises."""
        ...


class NodeShell(Protocol):
    def run(self, command: str, timeout: float) -> Completed:
        """Run `command` with /bin/sh on the node; never raises for a non-zero exit."""
        ...

    def start(self, command: str, timeout: float) -> Started:
        """Start `command` with /bin/sh on the node and leave it running (`timeout`: for starting
        it); raises OSError (or paramiko's SSHException) when it cannot be started."""
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

    def start(self, command: str, timeout: float) -> Started:
        return LocalStarted(command)

    def close(self) -> None:
        pass


class LocalStarted:
    """A local process of `/bin/sh -c command`, its input, output and error each a pipe."""

    def __init__(self, command: str) -> None:
        self.proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, timeout: float) -> bytes:
        assert self.proc.stdout is not None
        return _read_fd(self.proc.stdout.fileno(), timeout)

    def errors(self) -> str:
        assert self.proc.stderr is not None
        chunks = []
        while select.select([self.proc.stderr], [], [], 0)[0]:
            chunk = os.read(self.proc.stderr.fileno(), CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def stop(self, timeout: float) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except OSError:  # it exited and the pipe broke: nothing to end
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # the shell exec'ed the command: this is the command itself
            self.proc.wait()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def _read_fd(fd: int, timeout: float) -> bytes:
    if not select.select([fd], [], [], max(0.0, timeout))[0]:
        raise TimeoutError(f"no output within {timeout:.1f} s")
    return os.read(fd, CHUNK)


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

    def start(self, command: str, timeout: float) -> Started:
        return SSHStarted(self.conn, command, timeout)

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


class SSHStarted:
    """A command on its own session channel of the node's connection (no terminal: the command
    gets no hangup when the channel closes, only the end of its input)."""

    def __init__(self, conn: Connection, command: str, timeout: float) -> None:
        transport = conn.client.get_transport()
        if transport is None:
            raise paramiko.SSHException("the connection is closed")
        self.channel = transport.open_session(timeout=timeout)
        # paramiko waits for the node's reply to the exec with no bound of its own: a connection
        # gone silent would hold this thread until TCP gives up (~15 min). Closing the channel
        # ends that wait with an error.
        silent_message = f"no answer to starting the command within {timeout:g} s"
        gave_up = threading.Event()
        silent = threading.Timer(timeout, self._give_up, (gave_up,))
        silent.start()
        try:
            self.channel.exec_command(command)
        except BaseException:
            self.channel.close()
            if gave_up.is_set():
                raise paramiko.SSHException(silent_message) from None
            raise
        finally:
            silent.cancel()
            silent.join()  # a close under way ends first: none comes after the check below
        if gave_up.is_set():  # the exec's answer and the bound came together
            raise paramiko.SSHException(silent_message)

    def _give_up(self, gave_up: threading.Event) -> None:
        gave_up.set()
        self.channel.close()

    def write(self, data: bytes) -> None:
        try:
            self.channel.sendall(data)
        except (OSError, paramiko.SSHException) as e:  # OSError: the channel is closed
            raise OSError(f"cannot write to the command: {e}") from None

    def read(self, timeout: float) -> bytes:
        self.channel.settimeout(max(1e-3, timeout))
        return self.channel.recv(CHUNK)  # TimeoutError (socket.timeout) when none came

    def errors(self) -> str:
        chunks = []
        while self.channel.recv_stderr_ready():
            chunks.append(self.channel.recv_stderr(CHUNK))
        return b"".join(chunks).decode(errors="replace")

    def stop(self, timeout: float) -> None:
        try:
            self.channel.shutdown_write()
        except (OSError, paramiko.SSHException):  # the channel is gone already
            pass
        deadline = time.monotonic() + timeout
        while not self.channel.exit_status_ready() and time.monotonic() < deadline:
            time.sleep(STOP_POLL_S)
        try:
            self.channel.close()
        except (OSError, paramiko.SSHException):  # the connection under it is gone already
            pass


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
