"""Per-step metrics of a worker, written as `@@ADRUN {json}` lines on stderr for the launcher."""

from __future__ import annotations

import atexit
import json
import sys
import threading
import time
from typing import Any

import tensorflow as tf

from adrun.runtime.capture import static_batch_size
from adrun.runtime.grads import records_for

METRIC_PREFIX = "@@ADRUN "
_EMIT_INTERVAL_S = 0.5


def _fetched_names(fetches: Any) -> set[str]:
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
        return set().union(*map(_fetched_names, fetches)) if fetches else set()
    return set()


def _controls_a_step(graph: tf.Graph, names: set[str], train_ops: set[str]) -> bool:
    """Whether one of the named ops has a step op as a control input."""
    for name in names:
        try:
            op = graph.get_operation_by_name(name)
        except (KeyError, ValueError):
            continue
        if train_ops & {c.name for c in op.control_inputs}:
            return True
    return False


def _examples_in_feed(feed_dict: dict | None) -> int | None:
    """Batch size of a fed placeholder whose first dimension is open (the batch dimension)."""
    for key, value in (feed_dict or {}).items():
        shape = getattr(key, "shape", None)
        if shape is not None and shape.rank and shape[0] is None and hasattr(value, "__len__"):
            return len(value)
    return None


class StepReporter:
    def __init__(self) -> None:
        self.steps = 0
        self.examples: int | None = None
        self.wire_bytes = 0
        self._examples_read = False
        self._last_emit = 0.0
        self._emitted = 0  # the step count of the last report
        self._lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        atexit.register(self.emit)

    @staticmethod
    def is_training_step(graph: tf.Graph, fetches: Any) -> bool:
        """Whether running `fetches` runs an optimizer step: a step op is fetched, or is a control
        input of a fetched op (tf.group(train_op, ...), Keras's updates op).

        Asked before every `run`, so the graph is looked at once per set of fetched names."""
        records = records_for(graph)
        if not records.train_ops:
            return False
        names = _fetched_names(fetches)
        if records.train_ops & names:
            return True
        key = frozenset(names)
        decided = records.step_fetches.get(key)
        if decided is None:
            decided = records.step_fetches[key] = _controls_a_step(graph, names, records.train_ops)
        return decided

    def after_step(self, graph: tf.Graph, feed_dict: dict | None, examples: int | None = None) -> None:
        self.steps += 1
        self.wire_bytes = records_for(graph).wire_bytes_per_step
        if not self._examples_read:
            self.examples = examples or _examples_in_feed(feed_dict) or static_batch_size(graph)
            self._examples_read = True
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._report_pending, name="adrun-step-reporter", daemon=True)
            self._flusher.start()
        now = time.monotonic()
        if now - self._last_emit >= _EMIT_INTERVAL_S:
            self.emit(now)

    def _report_pending(self) -> None:
        """Report steps the throttle held back once the worker goes quiet: after a quick burst
        of steps, a worker that then waits (on a stalled peer, say) would otherwise leave the
        launcher with the count from before the burst, and its stall message with a wrong step."""
        while True:
            time.sleep(_EMIT_INTERVAL_S)
            if self.steps != self._emitted:
                self.emit()

    def emit(self, now: float | None = None) -> None:
        with self._lock:
            if not self.steps:
                return
            self._last_emit = now or time.monotonic()
            self._emitted = self.steps
            event = {
                "event": "step", "step": self.steps, "time": time.time(), "examples": self.examples,
                "wire_bytes": self.wire_bytes,
            }
            sys.__stderr__.write(METRIC_PREFIX + json.dumps(event) + "\n")
            sys.__stderr__.flush()
