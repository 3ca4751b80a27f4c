"""How a job ended, as data: per task, per attempt and for the whole job.

What supervising and restarting return, what `adrun.ui` shows and what `report.job_report` writes
out as JSON; kept apart from the supervisor so readers of a result need none of its machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from adrun.job_state import JobState

from .failures import Failure, signal_name
from .metrics import Throughput
from .tasks import Task

Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class TaskOutcome:
    task: Task
    pid: int
    returncode: int | None  # None only if the task could not be reaped
    stopped: bool  # ended because adrun stopped it (after success, a failure or an interrupt)

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.returncode)


@dataclass(frozen=True)
class Attempt:
    """How one attempt of a job ended, and whether adrun started the job again after it."""

    number: int  # ADRUN_RESTART_COUNT of its processes: 0 for the first
    exit_code: int
    failed: Failure | None
    steps: int  # training steps its workers ran, summed over the workers
    elapsed_s: float
    restarted: bool = False
    verdict: str | None = None  # why it was (or was not) restarted; None when it did not fail


@dataclass(frozen=True)
class JobResult:
    """How a job ended: what launching and supervising return, what ui shows and what
    `report.job_report` writes out as JSON."""

    exit_code: int
    failed: Failure | None  # the root cause; None when no task failed the job
    interrupted: bool
    metrics: Throughput  # per-worker steps and rates
    outcomes: list[TaskOutcome]  # per task: exit or signal, and whether adrun stopped it
    elapsed_s: float
    traffic: dict[str, tuple[int, int]] = field(default_factory=dict)  # node: (bytes sent, received)
    attempts: list[Attempt] = field(default_factory=list)  # every attempt, this one last (restarts.py)

    @property
    def state(self) -> JobState:
        """SUCCEEDED, FAILED or INTERRUPTED: the states a supervised job ends in."""
        if self.interrupted:
            return JobState.INTERRUPTED
        return JobState.SUCCEEDED if self.exit_code == 0 else JobState.FAILED
