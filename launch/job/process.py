"""A started task, as the supervisor and teardown see it: on this machine (`local.LocalProcess`)
or on another node under its keeper (`remote.RemoteProcess`).

Why one interface: supervision (reading the streams, noticing the end, naming a lost task) and
teardown (signal the group, wait until it is gone) must not care where a task runs; a kind of
process that lacks a method fails when it is made, not in the middle of a job's teardown.
"""

from __future__ import annotations

import fcntl
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType
from typing import Protocol


def task_pipe() -> tuple[int, int]:
    """`os.pipe()` whose ends are numbered 3 or more. A task inherits the read end under its
    number (ADRUN_RELEASE_FD, ADRUN_CAPTURE_ANSWER_FD); a launcher started with stdin, stdout or
    stderr closed would get one of 0-2, which the task's own stdio replaces, and which the task
    refuses (adrun/task_context.py)."""
    read, write = os.pipe()
    return _above_stdio(read), _above_stdio(write)


def _above_stdio(fd: int) -> int:
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)  # not inheritable, as os.pipe()'s ends are
    os.close(fd)
    return moved


class OutputLines(Protocol):
    """One output stream of a task: its lines as bytes until the task's end; `with` closes it."""

    def __iter__(self) -> Iterator[bytes]: ...

    def __enter__(self) -> OutputLines: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> object: ...


class TaskProcess(ABC):
    """A task's process group: its output, its exit status, and signals to the whole group."""

    @property
    @abstractmethod
    def pid(self) -> int:
        """The task's pid on its node (also its process group id: each task leads its own session)."""

    @property
    @abstractmethod
    def stdout(self) -> OutputLines: ...

    @property
    @abstractmethod
    def stderr(self) -> OutputLines: ...

    @property
    @abstractmethod
    def lost(self) -> str | None:
        """Why the task's state cannot be known any more (its node fell silent, its connection
        died), when that is so; None while it is known."""

    @abstractmethod
    def poll(self) -> int | None:
        """The exit status once the task has ended (negative: killed by that signal), else None."""

    @abstractmethod
    def release(self) -> None:
        """Let a worker waiting at the finish barrier end (adrun/runtime/finish.py); nothing for a
        task started without a release pipe, or released already."""

    @abstractmethod
    def terminate_group(self) -> None:
        """Ask the task and everything it started to stop (SIGTERM)."""

    @abstractmethod
    def kill_group(self) -> None:
        """Stop the task and everything it started, no questions asked (SIGKILL)."""

    @abstractmethod
    def group_alive(self) -> bool:
        """Whether any process of the task's group may still exist."""
