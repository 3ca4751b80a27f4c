"""Profile mode: time the script's training steps on one process and count the rows they touch.

The launcher runs the script once with ADRUN_MODE=profile (`adrun/profile/run.py`), on a first
start under Auto asked to wait where capture would end it (`at_capture_point`, capture_point.py). Its Sessions
stay the plain local sessions the script asked for, as a lone worker's are, and it trains as it
would alone, for `warmup` + `steps` training steps (a `Session.run` or Keras callable that runs an
optimizer step, as `metrics.StepReporter` counts them). At the next training step, or when the
script ends first, the process writes what it measured (`ProfileSamples`) and ends.

Two kinds of step, so that counting never adds to a timed step:
- a *counted* step also fetches, for every variable with sparse gradients that the step trains, the
  number of distinct ids in its gradient's IndexedSlices (`tf.size(tf.unique(indices))`), and how
  many of them fall in each of ROW_SLICES slices of the variable's rows (built next
  to the optimizer step when `apply_gradients` is called, before a MonitoredTrainingSession can
  finalize the graph). It must be the same `run` as the step: a batch from an iterator is only
  read once.
- a *timed* step runs the script's fetches alone. Its time is from the start of its `run` to the
  start of the next training step: the whole step as the script drives it (its input code in
  Python, its hooks), which a worker repeats in every step too. A step the script ends after is
  timed to the end of its `run`.
With sparse variables, steps 0, 2, 4, ... are counted and the odd ones are plain; without, every
step is plain. Warm-up steps are never timed; they run both kinds, so both executors exist (TF
builds one per set of fetches on its first run) before the first timed step.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from adrun.exit_codes import HOOK_DONE_EXIT_CODE
from adrun.profile_samples import ProfileSamples, save_samples
from adrun.runtime.capture import describe_graph
from adrun.runtime.capture_point import CapturePoint
from adrun.runtime.grads import GradientRecord, is_sparse, records_for, variable_name
from adrun.runtime.metrics import controls_a_step, fetched_names
from adrun.runtime.refusal import refusing
from adrun.runtime.reporting import report
from adrun.runtime.versions import GRAPH
from adrun.strategies.document import shard_sizes
from adrun.task_events import DoneEvent


# Slices of a sparse variable's rows whose touched rows are counted apart (RowsTouched.by_range):
# enough to see a frequency-sorted vocabulary's hot head, few enough to cost nothing.
ROW_SLICES = 16


@dataclass(frozen=True)
class RowCounter:
    train_op: str  # the optimizer step whose gradient it counts
    variable: str
    distinct: tf.Tensor  # int32 scalar: distinct ids in the gradient of one step
    # int32 [k]: of those, how many fall in each of k slices of axis 0 cut as shards are
    # (`document.shard_sizes`); None when the variable's row count is unknown at graph build
    by_slice: tf.Tensor | None


def slice_counts(ids: tf.Tensor, rows: int | None) -> tf.Tensor | None:
    """How many of `ids` fall in each of ROW_SLICES slices of `rows` rows (cut as shards are); None
    when the row count is unknown. TF2 mode's profiler counts with it too (tf2/profiler.py)."""
    if not rows or rows < 1:
        return None
    ends = np.cumsum(shard_sizes(rows, min(ROW_SLICES, rows)))
    slices = tf.searchsorted(tf.constant(ends, tf.int64), tf.cast(ids, tf.int64), side="right")
    return tf.math.bincount(tf.cast(slices, tf.int32), minlength=len(ends), maxlength=len(ends))


_counters: weakref.WeakKeyDictionary[tf.Graph, list[RowCounter]] = weakref.WeakKeyDictionary()
_run_by: weakref.WeakKeyDictionary[tf.Graph, dict[frozenset[str], list[RowCounter]]] = weakref.WeakKeyDictionary()


def add_row_counters(graph: tf.Graph, call: GradientRecord) -> None:
    """Count the distinct ids of each sparse gradient of `call` (an `apply_gradients` whose step op
    exists). Built outside the caller's control dependencies and control-flow context (a `minimize`
    under `tf.control_dependencies(update_ops)`, say): the counter adds no dependency of its own to
    the step it is fetched with."""
    sparse = [(grad, var) for grad, var in call.grads_and_vars if grad is not None and is_sparse(grad)]
    if not sparse or call.train_op is None:
        return
    with graph.as_default(), graph.control_dependencies(None), tf.compat.v1.name_scope("adrun_profile"):
        counters = []
        for grad, var in sparse:
            ids = tf.unique(tf.reshape(grad.indices, [-1])).y
            rows = var.shape[0] if var.shape.rank else None
            counters.append(RowCounter(call.train_op.name, variable_name(var), tf.size(ids), slice_counts(ids, rows)))
    _counters.setdefault(graph, []).extend(counters)
    _run_by.pop(graph, None)


def counters_run_by(graph: tf.Graph, fetches: Any) -> list[RowCounter]:
    """The counters of the optimizer steps that running `fetches` runs (decided once per set of names)."""
    counters = _counters.get(graph)
    if not counters:
        return []
    names = fetched_names(fetches)
    decided = _run_by.setdefault(graph, {})
    key = frozenset(names)
    if key not in decided:
        decided[key] = [c for c in counters if c.train_op in names or controls_a_step(graph, names, {c.train_op})]
    return decided[key]


class Profiler:
    """The measurements of one profiling process, written once: at the step after the last one, or
    at the script's end."""

    def __init__(self, warmup: int, steps: int, out_path: str, capture_point: CapturePoint) -> None:
        self.warmup = warmup
        self.steps = steps
        self.out_path = out_path
        self.steps_run = 0
        self.step_s: list[float] = []
        self.rows: dict[str, list[int]] = {}
        self.rows_by_slice: dict[str, list[list[int]]] = {}
        self.examples: int | None = None  # in the first step's feed or Keras batch, when it has one
        self._timed: tuple[float, float] | None = None  # (start, end) of the last timed run, until the next step
        self._graph: tf.Graph | None = None  # of the last training step, else of the last Session
        self._capture_point = capture_point
        self._versions_checked = False
        atexit.register(self._write_at_exit)

    def saw_session(self, graph: tf.Graph) -> None:
        if not self.steps_run:
            self._graph = graph

    def at_capture_point(self, graph: tf.Graph) -> None:
        """Where capture mode would describe `graph` and end, once it has an optimizer step: a
        Session created on it, or the first training step (of a Session made before its model),
        capture_point.py. Called before a step's clock starts, so the pause is never timed."""
        if records_for(graph).calls:
            if not self._versions_checked:
                refusing(GRAPH.check_versions)()  # now known to be a graph script, as capture checks it
                self._versions_checked = True
            self._capture_point.reached(lambda: describe_graph(graph))

    def training_step(
        self,
        graph: tf.Graph,
        fetches: Any,
        examples: int | None,
        run_plain: Callable[[], Any],
        run_counted: Callable[[list[tf.Tensor]], tuple[Any, list[Any]]],
    ) -> Any:
        """Run one training step of the script (`examples`: its batch size when its feed says so):
        counted, timed or (warm-up) neither."""
        start = time.perf_counter()
        self._close_timed(start)
        if self.steps_run == self.warmup + self.steps:
            self._write()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(HOOK_DONE_EXIT_CODE)
        index = self.steps_run
        self.steps_run += 1
        self._graph = graph
        if not index:
            self.examples = examples
        counters = counters_run_by(graph, fetches) if index % 2 == 0 else []
        if counters:
            sliced = [c for c in counters if c.by_slice is not None]
            result, counts = run_counted([c.distinct for c in counters] + [c.by_slice for c in sliced])
            for counter, count in zip(counters, counts[:len(counters)], strict=True):
                self.rows.setdefault(counter.variable, []).append(int(count))
            for counter, by_slice in zip(sliced, counts[len(counters):], strict=True):
                self.rows_by_slice.setdefault(counter.variable, []).append([int(n) for n in by_slice])
            return result
        result = run_plain()
        if index >= self.warmup:
            self._timed = (start, time.perf_counter())
        return result

    def _close_timed(self, next_start: float) -> None:
        if self._timed is not None:
            self.step_s.append(next_start - self._timed[0])
            self._timed = None

    def _write_at_exit(self) -> None:
        """The script ended first: its last timed step lasted as long as its `run`."""
        if self._timed is not None:
            start, end = self._timed
            self.step_s.append(end - start)
            self._timed = None
        self._write()

    def _write(self) -> None:
        if self._graph is None:
            return  # no Session: the launcher reports a script that is not in graph mode
        samples = ProfileSamples(
            graph=describe_graph(self._graph, self.examples), training_steps=self.steps_run, examples=self.examples,
            step_s=self.step_s, rows=self.rows, rows_by_slice=self.rows_by_slice,
        )
        save_samples(samples, self.out_path)
        report(DoneEvent(self.out_path))
