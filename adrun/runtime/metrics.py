"""Per-step metrics of a worker, reported to the launcher as step and waiting events
(adrun/task_events.py), and the step bound (`ADRUN_MAX_STEPS`) that ends a worker after its Nth
training step (after the finish barrier, adrun/runtime/finish.py, when its plan all-reduces)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Any

import tensorflow as tf

from adrun.runtime.capture import static_batch_size
from adrun.runtime.grads import records_for
from adrun.runtime.finish import wait_for_release
from adrun.runtime.reporting import report
from adrun.task_context import Mode, TaskContext
from adrun.task_events import StepEvent, WaitingEvent

EMIT_INTERVAL_S = 0.5
WAITING_AFTER_S = 2.0  # a step running this long is reported as waiting (a normal step is far shorter)


def fetched_names(fetches: Any) -> set[str]:
    """Op names in a fetch structure (tf.nest would sort dict keys, and MonitoredTrainingSession
    keys its fetch dicts by hook objects, which do not sort)."""
    if isinstance(fetches, tf.Operation):
        return {fetches.name}
    if isinstance(fetches, tf.Tensor):
        return {fetches.op.name}
    if isinstance(fetches, str):
        return {fetches.split(":")[0]}
    if isinstance(fetches, dict):
        fetches = list(fetches.values())
    if isinstance(fetches, (list, tuple)):
        return set().union(*map(fetched_names, fetches)) if fetches else set()
    return set()


def controls_a_step(graph: tf.Graph, names: set[str], train_ops: set[str]) -> bool:
    """Whether one of the named ops has a step op as a control input."""
    for name in names:
        try:
            op = graph.get_operation_by_name(name)
        except (KeyError, ValueError):
            continue
        if train_ops & {c.name for c in op.control_inputs}:
            return True
    return False


def examples_in_feed(feed_dict: dict | None) -> int | None:
    """Batch size of a fed placeholder whose first dimension is open (the batch dimension)."""
    for key, value in (feed_dict or {}).items():
        shape = getattr(key, "shape", None)
        if shape is not None and shape.rank and shape[0] is None and hasattr(value, "__len__"):
            return len(value)
    return None


class StepReporter:
    """Counts this worker's training steps and reports them to the launcher.

    Besides the (throttled) step counts it says when a training step has been running for
    WAITING_AFTER_S (a `waiting` event, once per step): a worker blocked inside a synchronous
    step waits for its peers, a worker outside any step holds them up. The launcher's stall
    message tells the two apart with it. With `max_steps` it ends the worker after that step,
    once the launcher releases it on `release_fd` (the finish barrier) when that is given.
    """

    def __init__(self, max_steps: int | None = None, release_fd: int | None = None, release_limit_s: float = 0.0) -> None:
        self.steps = 0
        self.max_steps = max_steps
        self.release_fd = release_fd
        self.release_limit_s = release_limit_s  # the worker's own bound on the barrier (finish.py)
        self.examples: int | None = None
        self.wire_bytes = 0
        self._examples_read = False
        self._last_emit = 0.0
        self._emitted = 0  # the step count of the last report
        self._step_began: tuple[float, float] | None = None  # (monotonic, wall) start of a running step
        self._waiting_reported = False
        self._flusher: threading.Thread | None = None
        atexit.register(self.emit)

    @classmethod
    def for_worker(cls, ctx: TaskContext) -> StepReporter:
        """The reporter of a run-mode worker: the job's step bound, and the finish barrier when the
        worker has peers it all-reduces with (PS tasks outlive the workers: no barrier needed)."""
        barrier = (ctx.mode == Mode.RUN and ctx.settings.max_steps is not None and ctx.release_fd is not None
                   and ctx.num_workers > 1 and ctx.strategy.uses_all_reduce)
        return cls(ctx.settings.max_steps, ctx.release_fd if barrier else None, 2 * ctx.settings.op_timeout_s)

    @staticmethod
    def is_training_step(graph: tf.Graph, fetches: Any) -> bool:
        """Whether running `fetches` runs an optimizer step: a step op is fetched, or is a control
        input of a fetched op (tf.group(train_op, ...), Keras's updates op).

        Asked before every `run`, so the graph is looked at once per set of fetched names."""
        records = records_for(graph)
        if not records.train_ops:
            return False
        names = fetched_names(fetches)
        if records.train_ops & names:
            return True
        key = frozenset(names)
        decided = records.step_fetches.get(key)
        if decided is None:
            decided = records.step_fetches[key] = controls_a_step(graph, names, records.train_ops)
        return decided

    def before_step(self) -> None:
        """A training step (or the start op before the first) is about to run."""
        self._step_began, self._waiting_reported = (time.monotonic(), time.time()), False
        self._start_reporting()

    @property
    def in_step(self) -> bool:
        """Whether a training step has begun and not ended."""
        return self._step_began is not None

    def step_failed(self) -> None:
        """The step raised (the script may catch it, e.g. an input's OutOfRangeError)."""
        self._step_began = None

    def after_step(self, graph: tf.Graph, feed_dict: dict | None, examples: int | None = None) -> None:
        if not self._examples_read:
            examples = examples or examples_in_feed(feed_dict) or static_batch_size(graph)
        self.step_done(examples, records_for(graph).wire_bytes_per_step)

    def step_done(self, examples: int | None, wire_bytes: int) -> None:
        """A training step ended (graph mode: `after_step`; TF2 mode: an outermost optimizer
        apply, adrun/runtime/tf2/sync.py); `examples` is read at the first step only."""
        self._step_began = None
        self.steps += 1
        self._start_reporting()
        self.wire_bytes = wire_bytes
        if not self._examples_read:
            self.examples = examples
            self._examples_read = True
        if self.steps == self.max_steps:
            self.end_worker()
        now = time.monotonic()
        if now - self._last_emit >= EMIT_INTERVAL_S:
            self.emit(now)

    def end_worker(self) -> None:
        """End this worker, exit status 0, its last metric line and output written; with a release
        pipe, only once the launcher releases it (the finish barrier, adrun/runtime/finish.py).

        Bounded runs (`adrun profile --trials`) need every worker to stop after exactly its Nth
        step. Under a synchronous PS plan the Nth step of every worker completes (no peer leaves
        before its own Nth step, and the chief's Nth step releases the others), so nobody waits
        for a worker that left. Under an all-reduce plan a ring peer may still be fetching this
        worker's last chunk from its server: the barrier keeps the server up until every worker
        has finished. The script's code after the step (saving, evaluation, a
        MonitoredTrainingSession's hooks at close) does not run: it could run further steps, or
        wait for peers that have already ended.
        """
        self.emit()
        for stream in filter(None, (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):  # replaced by the script, or closed
                pass
        if self.release_fd is not None:
            wait_for_release(self.release_fd, self.steps, self.release_limit_s)
        os._exit(0)

    def _start_reporting(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._report_pending, name="adrun-step-reporter", daemon=True)
            self._flusher.start()

    def _report_pending(self) -> None:
        """Report steps the throttle held back once the worker goes quiet: after a quick burst
        of steps, a worker that then waits (on a stalled peer, say) would otherwise leave the
        launcher with the count from before the burst, and its stall message with a wrong step.
        Also report a step that has been running for WAITING_AFTER_S."""
        while True:
            time.sleep(EMIT_INTERVAL_S)
            if self.steps != self._emitted:
                self.emit()
            began = self._step_began
            if began is not None and not self._waiting_reported and time.monotonic() - began[0] >= WAITING_AFTER_S:
                self._waiting_reported = True
                report(WaitingEvent(self.steps, time.time(), since=began[1]))

    def emit(self, now: float | None = None) -> None:
        if not self.steps:
            return
        self._last_emit = now or time.monotonic()
        self._emitted = self.steps
        report(StepEvent(self.steps, time.time(), examples=self.examples, wire_bytes=self.wire_bytes))
