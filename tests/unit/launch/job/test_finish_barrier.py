"""The launcher's half of the finish barrier (launch/job/finish_barrier.py), with fake workers:
the waiting workers are released once every worker finished or exited, once; past the bound,
the workers that never finished are named."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from adrun.launch.job.finish_barrier import FinishBarrier
from adrun.launch.job.stalls import Progress, StallWatch
from adrun.launch.job.tasks import Task
from adrun.task_events import StepEvent, WaitingEvent


@dataclass
class Worker:
    task: Task
    returncode: int | None = None
    progress: Progress = field(default_factory=Progress)


def _workers(n: int) -> list[Worker]:
    return [Worker(Task("worker", i, "localhost", 0)) for i in range(n)]


def _finish(barrier: FinishBarrier, worker: Worker, now: float) -> None:
    worker.progress.finished = True
    barrier.finished(worker.task, now)


def test_the_waiting_workers_are_released_once_every_worker_finished_or_exited():
    barrier = FinishBarrier(timeout_s=60)
    w0, w1, w2 = workers = _workers(3)
    assert barrier.to_release(workers) == []  # nobody waits
    _finish(barrier, w0, now=10)
    assert barrier.to_release(workers) == []  # w1 and w2 still run
    w2.returncode = 0  # its script ended before the bound
    assert barrier.to_release(workers) == []
    _finish(barrier, w1, now=11)
    assert barrier.to_release(workers) == [w0, w1]
    assert barrier.to_release(workers) == []  # once
    assert barrier.overdue(workers, now=1000) is None  # released: nothing is overdue


def test_past_the_bound_the_workers_that_never_finished_are_named():
    barrier = FinishBarrier(timeout_s=3)
    w0, w1, w2 = workers = _workers(3)
    _finish(barrier, w1, now=100)
    assert barrier.overdue(workers, now=102.9) is None
    overdue = barrier.overdue(workers, now=103)
    assert overdue is not None and overdue.late == [w0, w2]
    assert overdue.detail == ("did not finish its bounded run within ADRUN_OP_TIMEOUT (3 s) after w1 finished its "
                              "last step; workers that never finished: w0, w2 (the finished workers waited for "
                              "them at the finish barrier)")
    assert barrier.to_release(workers) == []


def test_without_a_bound_the_barrier_never_gives_up():
    barrier = FinishBarrier(timeout_s=0)
    w0, w1 = workers = _workers(2)
    _finish(barrier, w0, now=0)
    assert barrier.overdue(workers, now=1e9) is None
    _finish(barrier, w1, now=1e9)
    assert barrier.to_release(workers) == [w0, w1]


def test_a_worker_waiting_at_the_barrier_is_no_stall_and_holds_nobody_up():
    """w0 finished long ago and waits; w1 is stuck inside its last step: the stall is w1's own,
    and what is said of w0 is that it waits for the others."""
    watch = StallWatch(timeout_s=5, on_stall="fail")
    w0, w1 = workers = _workers(2)
    for worker, step in ((w0, 5), (w1, 4)):
        watch.noted(worker.progress, StepEvent(step, time=0.0), [w.progress for w in workers])
    w0.progress.finished = True
    now = time.monotonic()
    watch.noted(w1.progress, WaitingEvent(4, time=now, since=now), [w.progress for w in workers])
    check = watch.check(workers, now + 10)
    assert check.blamed is w1
    assert "other workers: w0 finished at step 5, waiting for the others" in check.detail
    assert "it is waiting for a parameter server or another worker" in check.detail
