"""The launcher's half of the finish barrier of a bounded run (ADRUN_MAX_STEPS).

A worker whose plan all-reduces does not leave after its last step: a ring peer may still be
fetching that worker's last chunk from its server. It reports `FinishedEvent` and waits
(adrun/runtime/finish.py) until the launcher releases it, which is decided here: once every
worker has finished or exited, every waiting worker is released, once. The wait is bounded by
ADRUN_OP_TIMEOUT from the first worker that finished (in a synchronous all-reduce job the others
finish within a step of it): past that, the workers that neither finished nor exited are named
and the supervisor fails the job, which stops every task, the waiting ones included. A worker
dying while others wait fails the job as any worker's death does, with the same teardown.

Why the workers wait, and the launcher releases them: torchelastic keeps each node's agent alive
at an exit barrier in its rendezvous store, under a timeout, because peers may still need that
node; here it is the workers' own servers the peers read from, so the workers are what must stay
up, and the launcher already hears every worker's steps and exit over every path a task is
started on: it is the store, with no server of its own, and the barrier ends with the job however
the job ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from adrun.env_vars import OP_TIMEOUT_VAR

from .stalls import Watched
from .tasks import Task

W = TypeVar("W", bound=Watched)


@dataclass(frozen=True)
class Overdue(Generic[W]):
    """Workers that never finished while others waited at the barrier, and what to say of it."""

    late: list[W]
    detail: str  # completes "<the first late worker> ...", naming every late worker


class FinishBarrier:
    """The barrier of one attempt's workers (`timeout_s` 0: the waiting workers wait unbounded)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.opened_at: float | None = None  # when the first worker finished
        self.first: Task | None = None
        self.released = False

    def finished(self, task: Task, now: float) -> None:
        """`task` reported its last step and waits (its `progress.finished` is set by the caller)."""
        if self.opened_at is None:
            self.opened_at, self.first = now, task

    def to_release(self, workers: Sequence[W]) -> list[W]:
        """The waiting workers, once every worker has finished or exited; else (and ever after
        they were handed out once) none."""
        if self.released or self.opened_at is None:
            return []
        if not all(w.progress.finished or w.returncode is not None for w in workers):
            return []
        self.released = True
        return [w for w in workers if w.progress.finished and w.returncode is None]

    def overdue(self, workers: Sequence[W], now: float) -> Overdue[W] | None:
        """The workers neither finished nor exited `timeout_s` after the first finished; None
        while there is time left (or nobody waits)."""
        if self.released or self.opened_at is None or not self.timeout_s or now - self.opened_at < self.timeout_s:
            return None
        late = [w for w in workers if w.returncode is None and not w.progress.finished]
        if not late:
            return None
        assert self.first is not None
        names = ", ".join(w.task.label for w in late)
        detail = (f"did not finish its bounded run within {OP_TIMEOUT_VAR} ({self.timeout_s:g} s) after "
                  f"{self.first.label} finished its last step; workers that never finished: {names} "
                  "(the finished workers waited for them at the finish barrier)")
        return Overdue(late, detail)
