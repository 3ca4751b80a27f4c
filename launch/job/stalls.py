"""The stall policy: when a worker counts as stalled, what the launcher can tell about it, and
which worker a stall is blamed on.

A worker without a new step for the timeout, counted from the first training step of any worker
(start-up, importing TF and building graphs, is no stall), gets a warning, since a slow step is
not a dead one; with `on_stall="fail"` the stalled worker most likely holding up the others fails
the job instead. Each worker's progress comes from its events (`adrun.task_events`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

from adrun.task_events import StepEvent, WaitingEvent

from .tasks import Task


@dataclass
class Progress:
    """How far one worker got, as the launcher last heard."""

    at: float = field(default_factory=time.monotonic)  # last new step (or start)
    last_step: int | None = None
    warned: bool = False  # this stall was reported already
    waiting_since: float | None = None  # blocked inside a training step since (a `waiting` event)
    finished: bool = False  # ran its last step of a bounded run: waits at the finish barrier, no stall

    def note(self, event: StepEvent | WaitingEvent) -> None:
        if isinstance(event, StepEvent):
            if event.step != self.last_step:
                self.last_step, self.at, self.warned, self.waiting_since = event.step, time.monotonic(), False, None
        else:
            # the worker's clock may differ from this one: keep only how long it has waited
            self.waiting_since = time.monotonic() - max(0.0, event.time - event.since)


class Watched(Protocol):
    """A worker as the policy sees it."""

    @property
    def task(self) -> Task: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def progress(self) -> Progress: ...


W = TypeVar("W", bound=Watched)


@dataclass(frozen=True)
class StallCheck(Generic[W]):
    warnings: list[str] = field(default_factory=list)  # stalls to warn of, once each
    blamed: W | None = None  # with on_stall="fail": the worker that fails the job ...
    detail: str = ""  # ... and what is known about its stall


class StallWatch:
    """The policy applied to one attempt's workers (`timeout_s` None: no stall is ever reported)."""

    def __init__(self, timeout_s: float | None, on_stall: Literal["warn", "fail"]) -> None:
        self.timeout_s = timeout_s
        self.on_stall = on_stall
        self.training = False  # some worker has begun a training step: start-up is over

    def noted(self, progress: Progress, event: StepEvent | WaitingEvent, everyone: Sequence[Progress]) -> None:
        """A worker reported a step (or waiting inside one); the first such event of any worker
        starts the stall clocks of the workers still starting."""
        if not self.training:
            self.training = True
            for other in everyone:
                if other.last_step is None:
                    other.at = time.monotonic()
        progress.note(event)

    def check(self, workers: Sequence[W], now: float) -> StallCheck[W]:
        """Warn once per stall about a running worker whose step count has not moved, or, with
        `on_stall="fail"`, blame the worker most likely to hold up the others (one outside any
        training step that the stalled worker's step waits for)."""
        timeout_s = self.timeout_s
        if timeout_s is None or not self.training:
            return StallCheck()
        # a worker outside any step holds up the ones waiting inside one: it comes first
        stalled = sorted((w for w in workers if w.returncode is None and not w.progress.warned
                          and not w.progress.finished and now - w.progress.at >= timeout_s),
                         key=lambda w: (w.progress.waiting_since is not None, w.progress.at))
        warnings = []
        for worker in stalled:
            worker.progress.warned = True
            if self.on_stall == "fail":
                blamed = _holding_up(worker, workers) or worker
                return StallCheck(blamed=blamed, detail=_stall_detail(blamed, workers, now))
            task = worker.task
            warnings.append(f"{task.label} (worker {task.index} on {task.host}) {_stall_detail(worker, workers, now)}")
        return StallCheck(warnings)


def _stall_detail(worker: W, workers: Sequence[W], now: float) -> str:
    """What the launcher can tell about a stall: how long this worker has not stepped, whether it
    is blocked inside a training step (then it waits for a PS or a peer) or outside one (then its
    script is busy or hung, and peers in a synchronous step wait for it), and where the others are."""
    progress = worker.progress
    detail = f"has made no training progress for {now - progress.at:.0f} s ({_activity(worker, now, 'still ')})"
    others = [f"{other.task.label} {_activity(other, now)}" for other in workers if other is not worker]
    if others:
        detail += "; other workers: " + ", ".join(others)
    if progress.waiting_since is not None:
        return detail + "; it is waiting for a parameter server or another worker"
    if progress.last_step is None:
        return detail + "; it has not started training while others have (still building its graph?)"
    if any(other.progress.waiting_since is not None for other in workers if other is not worker):
        return detail + "; its script is busy or hung outside TensorFlow, and the others wait for it"
    return detail + "; its script is busy or hung outside TensorFlow"


def _holding_up(worker: W, workers: Sequence[W]) -> W | None:
    """The worker a stalled `worker`, blocked inside a training step, most likely waits for: a
    running worker outside any step, no further than `worker` (a synchronous step needs its
    gradient), the one that stopped first. None when `worker` is outside a step itself or no such
    worker exists (then it waits for a parameter server or the network)."""
    if worker.progress.waiting_since is None:
        return None
    behind = [other for other in workers if other is not worker and other.returncode is None
              and other.progress.waiting_since is None and not other.progress.finished
              and (other.progress.last_step or 0) <= (worker.progress.last_step or 0)]
    return min(behind, key=lambda other: other.progress.at, default=None)


def _activity(worker: Watched, now: float, still: str = "") -> str:
    """`at step 3, waiting in step 4 for 21 s`: one worker's state as the launcher last heard it."""
    if worker.returncode is not None:
        return f"finished (exit {worker.returncode})"
    progress = worker.progress
    if progress.finished:
        return f"finished at step {progress.last_step}, waiting for the others"
    text = "no step yet" if progress.last_step is None else f"{still}at step {progress.last_step}"
    if progress.waiting_since is not None:
        return f"{text}, waiting in step {(progress.last_step or 0) + 1} for {now - progress.waiting_since:.0f} s"
    if progress.last_step is not None:
        text += ", outside any training step"
    return text
