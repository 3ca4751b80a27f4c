"""ADRUN_OP_TIMEOUT for a TF2 worker's collectives: one deadline per step, kept by a thread of adrun's.

Graph mode bounds each `session.run` (`operation_timeout_in_ms`). TF2 mode once gave each collective
op its own `timeout_seconds`, but TF keeps such a timeout by starting an OS thread per collective
call that sleeps for the whole timeout (`SchedClosureAfter`): measured on the NCF Keras workload
(7 collectives a step, the 600 s default), a worker held ≈4,700 sleeping threads after a minute and
died of `std::system_error: Resource temporarily unavailable` near step 1,100, and on the way every
step paid the thread starts (≈68 ms a step against ≈18 ms with the timeout off, 2 workers on the
busy 2-core machine). So the collectives carry no timeout, and the step counters' reader
(steps.py, every half second) ends a step whose collectives have run longer than the timeout: it
aborts this process's collectives with DEADLINE_EXCEEDED, as TF's own timeout does, and the
script's step raises `DeadlineExceededError` (peers.py names it a timeout).
"""

from __future__ import annotations

import time
from collections.abc import Callable

ABORT_MESSAGE = ("adrun: a training step's collectives ran longer than ADRUN_OP_TIMEOUT ({seconds:g} s): "
                 "a peer stopped responding")


def abort_collectives(seconds: float) -> None:
    """Fail this process's running and later collectives with DEADLINE_EXCEEDED."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    context.context().abort_collective_ops(tf.errors.DEADLINE_EXCEEDED, ABORT_MESSAGE.format(seconds=seconds))


class StepDeadline:
    """Told, at each read of the counters, how many steps have started and finished; calls `abort`
    once when the same step has been running for `timeout_s` (0: never)."""

    def __init__(self, timeout_s: float, abort: Callable[[float], None] = abort_collectives,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._abort = abort
        self._clock = clock
        self._running: tuple[int, float] | None = None  # (started count, when first seen running)
        self._aborted = False

    def observe(self, started: int, done: int) -> None:
        if started <= done or self._timeout_s <= 0:
            self._running = None
            return
        now = self._clock()
        if self._running is None or self._running[0] != started:
            self._running = (started, now)
        elif not self._aborted and now - self._running[1] >= self._timeout_s:
            self._aborted = True
            self._abort(self._timeout_s)
