"""Profile mode for TF2 scripts: time the steps of one process at its optimizer applies and count the
rows its sparse gradients touch; the same `ProfileSamples` graph mode's profiler writes
(adrun/runtime/profiler.py), so the launcher, the cost model and Auto take either alike.

A TF2 step has no `Session.run` to time. Each step of the script's first optimizer places a *mark*
(a `py_function`, run eagerly or inside the traced step) under control dependencies on all of that
apply's gradients: the mark of step j runs once step j's gradients exist, so the time from mark j-1
to mark j is one whole step as the script drives it (step j-1's update, step j's input, forward and
backward, the script's own code between steps). Step 0 is never timed (nothing marks its start),
nor are the `warmup` steps.

Rows: for each sparse gradient of that apply, the distinct ids (and how many fall in each of
ROW_SLICES slices of the rows) are counted in the step itself, on even steps only (a counter
variable's parity, in the graph): a counted step's time includes the counting and is not kept, so
with sparse variables about every other step is timed, as in graph mode.

The process ends at the mark after `warmup + steps` steps, having written the samples, or at the
script's own end, writing what it measured. Asked to, it waits at CAPTURE_MARK, where capture would
end the script, for the launcher to say whether to go on (capture_point.py); the step spanning that
wait is not timed. Version checks and refusals are capture's (at the first apply, and at the end of
a script that never applied); what the script writes goes to a scratch directory
(tf2/around.PROFILE_PATCHES).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from typing import Any

import tensorflow as tf

from adrun.exit_codes import HOOK_DONE_EXIT_CODE
from adrun.profile_samples import ProfileSamples, save_samples
from adrun.runtime.capture_point import CapturePoint
from adrun.runtime.profiler import ROW_SLICES, slice_counts
from adrun.runtime.refusal import refusing
from adrun.runtime.reporting import report
from adrun.runtime.tf2.applied import AppliedVariables
from adrun.runtime.tf2.capture import check_for_apply
from adrun.runtime.tf2.optimizer_hooks import is_sparse, traced_batch_size
from adrun.runtime.versions import TF2
from adrun.task_events import DoneEvent

# (variable name, slices counted) per sparse gradient, in the order of a mark's counts
Layout = tuple[tuple[str, int], ...]
# The mark where capture would end the script: step 1's gradients exist, so every apply of step 0
# (an eager GAN's second optimizer too) has been seen, as capture's eager rule waits for.
CAPTURE_MARK = 1


class ProfileAtApply:
    """Profile mode's ApplyHook (optimizer_hooks.py) for a TF2 script."""

    def __init__(self, warmup: int, steps: int, out_path: str, capture_point: CapturePoint) -> None:
        self.warmup, self.steps, self.out_path = warmup, steps, out_path
        self._capture_point = capture_point
        self._seen = AppliedVariables()
        self._first: int | None = None  # id of the first optimizer that applied: its applies are the steps
        self._parity: tf.Variable | None = None
        self.marks = 0  # steps whose gradients existed
        self._last: float | None = None
        self.step_s: list[float] = []
        self.rows: dict[str, list[int]] = {}
        self.rows_by_slice: dict[str, list[list[int]]] = {}
        self.examples: int | None = None
        self._written = False
        atexit.register(self._write)

    @property
    def applied(self) -> bool:
        """Whether a TF2 optimizer applied (graph mode's applies are its own profiler's)."""
        return self._first is not None

    def before(self, optimizer: Any, grads: list[Any], variables: list[Any]) -> list[Any]:
        from tensorflow.python.framework import ops

        if not ops.executing_eagerly_outside_functions():
            return grads  # a graph-mode apply (tf_keras, eager execution disabled): graph mode's profiler
        if self._first is None:
            refusing(TF2.check_versions)()  # now known to be a TF2 script, as capture checks it
            self._first = id(optimizer)
        self._seen.add(optimizer, grads, variables)
        if id(optimizer) == self._first:
            self._place_mark(grads, variables)
        return grads

    def _place_mark(self, grads: list[Any], variables: list[Any]) -> None:
        sparse = [(g, v) for g, v in zip(grads, variables, strict=True) if g is not None and is_sparse(g)]
        ready = [t for g in grads if g is not None for t in ((g.values, g.indices) if is_sparse(g) else (g,))]
        with tf.control_dependencies(ready):
            layout, counts = self._counts(sparse)
            batch = None if tf.executing_eagerly() else traced_batch_size()
            tf.py_function(functools.partial(self._mark, layout),
                           [counts, batch if batch is not None else tf.constant(0)], [])

    def _counts(self, sparse: list[tuple[Any, Any]]) -> tuple[Layout, tf.Tensor]:
        """The layout and an int32 vector of this step's counts: every sparse gradient's distinct ids,
        then its slice counts; all -1 on a step that does not count (odd steps)."""
        if not sparse:
            return (), tf.zeros([0], tf.int32)
        layout: list[tuple[str, int]] = []
        parts = []
        for grad, var in sparse:
            ids = tf.unique(tf.reshape(grad.indices, [-1])).y
            rows = int(var.shape[0]) if var.shape.rank and var.shape[0] is not None else None
            by_slice = slice_counts(ids, rows)
            slices = 0 if rows is None else min(ROW_SLICES, rows)
            parts.append(tf.reshape(tf.size(ids, out_type=tf.int32), [1]))
            layout.append((self._seen.names(var), slices))
            if by_slice is not None:
                parts.append(tf.reshape(tf.cast(by_slice, tf.int32), [slices]))
        size = len(layout) + sum(n for _, n in layout)
        counted = tf.equal(self._step_parity().assign_add(1) % 2, 1)  # steps 0, 2, 4, ... count
        counts = tf.cond(counted, lambda: tf.concat(parts, 0), lambda: tf.fill([size], -1))
        return tuple(layout), counts

    def _step_parity(self) -> tf.Variable:
        if self._parity is None:
            with tf.init_scope():
                self._parity = tf.Variable(0, dtype=tf.int64, trainable=False, name="adrun_profile_steps")
        return self._parity

    def _mark(self, layout: Layout, counts: tf.Tensor, batch: tf.Tensor) -> list[Any]:
        """Step `self.marks`'s gradients exist: close its time, keep its counts; end after the last."""
        now = time.perf_counter()
        step = self.marks
        if step >= self.warmup + self.steps:
            self._write()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(HOOK_DONE_EXIT_CODE)
        if step == CAPTURE_MARK and self._capture_point.reached(lambda: self._seen.graph_item(self.examples)):
            now, self._last = time.perf_counter(), None  # the step that spans the pause is not timed
        self.marks += 1
        if not step:
            self.examples = int(batch) or None
        values = [int(n) for n in counts.numpy()]
        counted = bool(values) and values[0] >= 0
        if counted:
            self._keep_counts(layout, values)
        if self._last is not None and step >= self.warmup and not counted:
            self.step_s.append(now - self._last)
        self._last = now
        return []

    def _keep_counts(self, layout: Layout, values: list[int]) -> None:
        at = 0
        for name, slices in layout:
            self.rows.setdefault(name, []).append(values[at])
            if slices:
                self.rows_by_slice.setdefault(name, []).append(values[at + 1:at + 1 + slices])
            at += 1 + slices

    def _write(self) -> None:
        """Write the samples once (at the last mark, or at the script's end if it applied at all)."""
        if self._written or self._first is None:
            return
        self._written = True
        save_samples(ProfileSamples(graph=self._seen.graph_item(), training_steps=self.marks, examples=self.examples,
                                    step_s=self.step_s, rows=self.rows, rows_by_slice=self.rows_by_slice),
                     self.out_path)
        report(DoneEvent(self.out_path))


_profiler: ProfileAtApply | None = None


def profile_hook(warmup: int, steps: int, out_path: str, answer_fd: int | None) -> ProfileAtApply:
    """The process's one profiling hook, made, and capture's exit check installed, at the first call
    (right after `import tensorflow`); `answer_fd`: see capture_point.py."""
    global _profiler
    if _profiler is None:
        profiler = _profiler = ProfileAtApply(warmup, steps, out_path, CapturePoint(out_path, answer_fd))
        check_for_apply(lambda: profiler.applied)
    return _profiler
