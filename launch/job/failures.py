"""How a task failed a job: a tagged union of the ways (`Cause`), and the `Failure` that carries
one with the task's last words.

The supervisor builds the cause from what it knows for certain: the exit status, whether the
task's node was lost, and the events the task reported (adrun/task_events.py: an exception
nothing caught, a refusal by adrun's hook); never from the text of the task's output, which is
kept only to be shown. The restart rule (`restarts.judge`), the terminal view and the JobReport
read the cause's kind and fields.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from adrun.str_enum import StrEnum
from typing import ClassVar

from adrun.exit_codes import SIGNAL_EXIT_BASE, STALL_EXIT_CODE
from adrun.task_events import ErrorEvent, RefusalEvent

from .tasks import Task


def signal_name(returncode: int | None) -> str | None:
    """`SIGKILL` for an exit status of -9; None for a normal exit (or no status)."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class FailureKind(StrEnum):
    """The discriminator of `Cause`: which of its classes a failure is (JSON: its value)."""

    EXITED = "exited"
    RAISED = "raised"
    REFUSED = "refused"
    KILLED = "killed"
    STALLED = "stalled"
    LOST = "lost"


@dataclass(frozen=True)
class TaskExited:
    """The task ended on its own with `returncode` (a worker: not 0; a PS: at all) and reported
    no exception: an exit code the script chose."""

    kind: ClassVar[FailureKind] = FailureKind.EXITED
    returncode: int


@dataclass(frozen=True)
class TaskRaised:
    """The task ended on an exception nothing in it caught (its excepthook reported `error`)."""

    kind: ClassVar[FailureKind] = FailureKind.RAISED
    returncode: int
    error: ErrorEvent


@dataclass(frozen=True)
class TaskRefused:
    """adrun's hook refused the script (PLAN_MISMATCH_EXIT_CODE), saying why."""

    kind: ClassVar[FailureKind] = FailureKind.REFUSED
    returncode: int
    message: str


@dataclass(frozen=True)
class TaskKilled:
    """A signal ended the task (the OOM killer, a user, a crash)."""

    kind: ClassVar[FailureKind] = FailureKind.KILLED
    returncode: int  # minus the signal's number

    @property
    def signal(self) -> str:
        return signal_name(self.returncode) or f"status {self.returncode}"


@dataclass(frozen=True)
class TaskStalled:
    """A worker made no training progress for the stall timeout (`on_stall="fail"`), or never
    finished a bounded run while others waited at the finish barrier; it was still running, so it
    has no exit status."""

    kind: ClassVar[FailureKind] = FailureKind.STALLED
    detail: str  # what the launcher could tell about the stall
    stopped_by: str = "--on-stall fail"  # the rule that ended the job on it


@dataclass(frozen=True)
class NodeLost:
    """The task's node stopped answering or its connection died: the task's state is unknown."""

    kind: ClassVar[FailureKind] = FailureKind.LOST
    how: str
    returncode: int  # what the launcher reports for it (remote.LOST_CONNECTION)


Cause = TaskExited | TaskRaised | TaskRefused | TaskKilled | TaskStalled | NodeLost


def cause_of(returncode: int, *, lost: str | None = None, error: ErrorEvent | None = None,
             refusal: RefusalEvent | None = None) -> Cause:
    """The cause of a task's end from its status, its node's fate and its last reported events."""
    if lost is not None:
        return NodeLost(lost, returncode)
    if returncode < 0:
        return TaskKilled(returncode)
    if refusal is not None:
        return TaskRefused(returncode, refusal.message)
    if error is not None:
        return TaskRaised(returncode, error)
    return TaskExited(returncode)


@dataclass(frozen=True)
class Failure:
    """The task whose end (or stall) failed the job, how (`cause`), and its last words: its last
    stderr lines without TensorFlow's start-up noise (a traceback, typically) and its last lines
    on stdout."""

    task: Task
    cause: Cause
    stderr_tail: list[str] = field(default_factory=list)
    stdout_tail: list[str] = field(default_factory=list)
    step: int | None = None  # a worker's last reported step (steps run by it in this attempt)

    @property
    def returncode(self) -> int | None:
        """The task's exit status; None for a stall (the worker was still running)."""
        return None if isinstance(self.cause, TaskStalled) else self.cause.returncode

    @property
    def summary(self) -> str:
        """One line: which task, where, and how it ended."""
        who = f"{self.task.label} ({self.task.role} {self.task.index} on {self.task.host})"
        cause = self.cause
        if isinstance(cause, TaskStalled):
            return f"{who} {cause.detail}"
        if isinstance(cause, NodeLost):
            return f"{who}: {cause.how}, the task's state is unknown"
        if isinstance(cause, TaskKilled):
            return f"{who} was killed by {cause.signal}"
        if cause.returncode == 0:
            return f"{who} exited (code 0) while the workers were still running"
        return f"{who} exited with code {cause.returncode}"

    @property
    def job_exit_code(self) -> int:
        """The launcher's exit code for this failure, shell-style for signals."""
        returncode = self.returncode
        if returncode is None:
            return STALL_EXIT_CODE
        if returncode < 0:
            return SIGNAL_EXIT_BASE - returncode
        return returncode or 1
