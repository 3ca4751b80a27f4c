"""Capture mode for TF2 scripts: describe the model at its first optimizer apply, then exit.

Every apply (Keras 3 `apply`, tf_keras `apply_gradients`) adds its trained variables, as it builds
(inside a `tf.function` trace) or runs (eagerly). The process ends, with the GraphItem written, once
all applies of one training step are known:
- traced: when the traced step first runs (a `py_function` placed at each apply; by then every apply
  of the function, a GAN's two optimizers too, has been traced);
- eager: at the second apply of an optimizer already seen (all of a step's optimizers have applied).
A script that ends without any apply is refused with what it did (`refuse_at_exit`). At the first
apply, the script being known to be a TF2 script, the installed versions are checked (runtime/versions.py):
an untested one is refused there, by capture, before any run starts.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from adrun.exit_codes import HOOK_DONE_EXIT_CODE
from adrun.graph_item import save_graph_item
from adrun.runtime.refusal import refuse, refusing
from adrun.runtime.reporting import report
from adrun.runtime.tf2.applied import AppliedVariables
from adrun.runtime.tf2.optimizer_hooks import traced_batch_size
from adrun.runtime.versions import TF2
from adrun.task_events import DoneEvent

NO_APPLY = (
    "adrun synchronizes a TF2 script at its optimizer's apply (model.fit, optimizer.apply_gradients or "
    "optimizer.apply), and a script that updates variables by hand (assign_sub, raw ops) is not supported. "
    "A graph-mode script trains in a tf.compat.v1.Session or MonitoredTrainingSession."
)


def _end(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class CaptureAtApply:
    """The ApplyHook of capture mode (optimizer_hooks.py)."""

    def __init__(self, out_path: str) -> None:
        self._out = out_path
        self._seen = AppliedVariables()
        self._applied: set[int] = set()

    def before(self, optimizer: Any, grads: list[Any], variables: list[Any]) -> list[Any]:
        if not self._applied:
            refusing(TF2.check_versions)()  # now known to be a TF2 script: one clear message, from capture
        if tf.executing_eagerly() and id(optimizer) in self._applied:
            self.finish()
        self._applied.add(id(optimizer))
        self._seen.add(optimizer, grads, variables)
        if not tf.executing_eagerly():
            batch = traced_batch_size()
            tf.py_function(self._finish_from_graph, [batch if batch is not None else tf.constant(0)], tf.int32)
        return grads


    def _finish_from_graph(self, batch: tf.Tensor) -> int:
        self.finish(int(batch) or None)
        return 0

    def finish(self, batch_size: int | None = None) -> None:
        """Write the GraphItem and end the process (capture's usual end: exit code 0)."""
        save_graph_item(self._seen.graph_item(batch_size), self._out)
        report(DoneEvent(self._out))  # what capture_run reads as "written" (adrun/task_events.py)
        _end(HOOK_DONE_EXIT_CODE)


class NoApplyCheck:
    """Refuses, at its end, a script that never applied an optimizer, saying what it did: capture
    and the profiling run (profiler.py) alike, so a first start's one process refuses as capture did."""

    def __init__(self, applied: Callable[[], bool]) -> None:
        self._applied = applied  # whether the script applied (or its graph was described)
        self.created = 0  # variables the script created (counted by `count_created`)
        self.created_names: list[str] = []

    def count_created(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        """A variable creator that only counts, for the refusal's words."""
        var = next_creator(**kwargs)
        self.created += 1
        if len(self.created_names) < 3:
            self.created_names.append(getattr(var, "name", "?").split(":")[0])
        return var

    def refuse_at_exit(self) -> None:
        """At the end of a script that never applied an optimizer (and, graph mode, never made a
        training Session, whose capture would have written the file): say what it did. A script
        ending on an uncaught exception (Python set `sys.last_value` when it reported it) failed
        before that could be judged: its own error is what the user must read."""
        if (self._applied() or getattr(sys, "last_value", None) is not None
                or not tf.compat.v1.executing_eagerly_outside_functions()):
            return
        if self.created:
            seen = f"it created {self.created} variable(s) ({', '.join(self.created_names)}{', ...' if self.created > 3 else ''})"
        else:
            seen = "it created no variable"
        refuse(f"ran to its end without an optimizer apply: {seen}, "
               f"but no Keras or tf_keras optimizer applied gradients. {NO_APPLY}")


_capture: CaptureAtApply | None = None
_scopes: list[Any] = []  # entered for the process's life; a collected one would leave its scope


def check_for_apply(applied: Callable[[], bool]) -> None:
    """Count the variables the script creates from now on and refuse it at its end unless
    `applied()` (a NoApplyCheck; called right after `import tensorflow`)."""
    check = NoApplyCheck(applied)
    scope = tf.variable_creator_scope(check.count_created)
    scope.__enter__()
    _scopes.append(scope)
    atexit.register(check.refuse_at_exit)


def capture_hook(out_path: str) -> CaptureAtApply:
    """The process's one capture hook: made, and its exit check installed, at the first call
    (right after `import tensorflow`)."""
    global _capture
    if _capture is None:
        _capture = CaptureAtApply(out_path)
        check_for_apply(lambda: Path(out_path).exists())
    return _capture
