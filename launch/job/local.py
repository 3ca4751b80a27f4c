"""Tasks as subprocesses of the launcher on this machine.

Each task runs in its own session (so its process group can be signalled as a whole, and a
terminal's Ctrl-C reaches only the launcher, which then stops the job in order) and with a
parent-death signal (so a SIGKILLed launcher cannot leave tasks running).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from adrun.env_vars import RELEASE_FD_VAR

from ..nodes.node_tools import group_alive, signal_group
from .process import TaskProcess, task_pipe

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None)


def worker_argv(python: str, script: str | Path, script_args: Sequence[str]) -> list[str]:
    """A worker runs the user's script unchanged; the hook on PYTHONPATH does the rest."""
    return [python, str(script), *script_args]


def ps_argv(python: str) -> list[str]:
    """A parameter server is adrun's own TF server process."""
    return [python, "-m", "adrun.runtime.ps_server"]


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: ask the kernel for SIGKILL when the parent dies.

    The death signal fires when the forking *thread* exits, so tasks must be started from a
    thread that lives as long as the job: the supervisor starts them from the thread it runs in. If the
    parent already died before the request took effect, the child is an orphan: end it now.
    """
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


class LocalProcess(TaskProcess):
    """A task started here: its pipes, exit status, and signals to its whole process group."""

    def __init__(self, argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str],
                 pass_fds: Sequence[int] = (), release: bool = False) -> None:
        """`pass_fds`: descriptors the task inherits under the same numbers (a pipe the launcher
        answers a profiling process on, adrun/capture_run.py). `release`: give the task a release
        pipe for the finish barrier, its read end named by ADRUN_RELEASE_FD (`release()` writes)."""
        parent_pid = os.getpid()
        env = dict(env)
        fds = tuple(pass_fds)
        self._release_write: int | None = None
        release_read: int | None = None
        if release:
            release_read, self._release_write = task_pipe()
            env[RELEASE_FD_VAR] = str(release_read)
            fds += (release_read,)
        try:
            self._popen = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=fds,
                preexec_fn=lambda: _die_with_parent(parent_pid),
            )
        except BaseException:
            self._close_release()
            raise
        finally:
            if release_read is not None:
                os.close(release_read)

    @property
    def pid(self) -> int:
        """Also the process group id: each task leads its own session."""
        return self._popen.pid

    @property
    def stdout(self) -> IO[bytes]:
        assert self._popen.stdout is not None
        return self._popen.stdout

    @property
    def stderr(self) -> IO[bytes]:
        assert self._popen.stderr is not None
        return self._popen.stderr

    @property
    def lost(self) -> None:
        """Never: a child of the launcher always has a known state."""
        return None

    def communicate(self, timeout: float) -> tuple[bytes, bytes]:
        """Wait for the task to end and return everything it wrote (TimeoutExpired after `timeout`)."""
        return self._popen.communicate(timeout=timeout)

    def poll(self) -> int | None:
        code = self._popen.poll()
        if code is not None:
            self._close_release()
        return code

    def release(self) -> None:
        """One line on the release pipe, then its end: the worker reads either as its release."""
        if self._release_write is not None:
            try:
                os.write(self._release_write, b"release\n")
            except OSError:  # the task has gone (EPIPE): nobody waits
                pass
            self._close_release()

    def _close_release(self) -> None:
        if self._release_write is not None:
            os.close(self._release_write)
            self._release_write = None

    def wait(self, timeout: float) -> int:
        """The task's exit status once it has ended (TimeoutExpired after `timeout`), for a caller
        that reads its streams itself."""
        return self._popen.wait(timeout=timeout)

    def terminate_group(self) -> None:
        signal_group(self.pid, signal.SIGTERM)

    def kill_group(self) -> None:
        signal_group(self.pid, signal.SIGKILL)

    def group_alive(self) -> bool:
        """Whether any process of the task's group still exists (reaps the task itself first)."""
        self.poll()
        return group_alive(self.pid)
