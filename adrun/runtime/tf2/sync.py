"""Run mode's ApplyHook: each outermost optimizer apply applies the mean of the workers' gradients.

The reduction comes before the optimizer sees the gradients, so clipping, loss-scale unscaling and
its finite check, weight decay and gradient accumulation all work on the mean, identically on every
worker. Each apply is also one training step for the launcher's metrics (`steps.py`), counted in the
graph when it runs, not when it is traced.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from adrun.runtime.context import TaskContext
from adrun.runtime.refusal import refuse
from adrun.runtime.tf2.duplicate_rows import sums_duplicate_rows
from adrun.runtime.tf2.optimizer_hooks import VariableNames, is_sparse, traced_batch_size
from adrun.runtime.tf2.reduction import TF2Collectives, mean_gradients
from adrun.runtime.tf2.steps import StepCounters
from adrun.strategies.document import VariablePlan


class SynchronizedApply:
    def __init__(self, ctx: TaskContext, collectives: TF2Collectives, steps: StepCounters) -> None:
        self._plan = PlanCheck(ctx)
        self._collectives = collectives
        self._steps = steps
        self._wire_bytes: dict[int, int] = {}  # per optimizer: dense bytes its apply hands the collectives

    def before(self, optimizer: Any, grads: list, variables: list) -> list:
        planned = [(i, self._plan(var, grad), grad) for i, (grad, var) in enumerate(zip(grads, variables, strict=True))
                   if grad is not None]
        if not planned:
            return grads
        with tf.control_dependencies([self._steps.started()]):
            planned = [(i, plan, ordered(grad)) for i, plan, grad in planned]
        sum_per_index = sums_duplicate_rows(optimizer)
        applied = ", ".join(f"{plan.name} ({'sparse' if is_sparse(grad) else 'dense'})" for _, plan, grad in planned)
        self._collectives.wire_bytes = 0
        means, checked = mean_gradients(self._collectives, [(plan, grad) for _, plan, grad in planned], sum_per_index,
                                        f"{applied}; rows summed per index: {sum_per_index}")
        self._wire_bytes[id(optimizer)] = self._collectives.wire_bytes
        self._steps.wire_bytes = sum(self._wire_bytes.values())
        out = list(grads)
        for (i, _, _), mean in zip(planned, means, strict=True):
            out[i] = mean
        with tf.control_dependencies([value_of(m) for m in means] + ([checked] if checked is not None else [])):
            self._steps.done(None if tf.executing_eagerly() else traced_batch_size())
        return out


class PlanCheck:
    """Each applied variable's plan, found by its name (VariableNames); a variable the plan does not
    name, or names with another shape, dtype or gradient kind, is refused with what differs."""

    def __init__(self, ctx: TaskContext) -> None:
        self._ctx = ctx
        self._plans = {v.name: v for v in ctx.strategy.variables}
        self._names = VariableNames()

    def __call__(self, var: Any, grad: Any) -> VariablePlan:
        name = self._names(var)
        plan = self._plans.get(name)
        kind = "sparse" if is_sparse(grad) else "dense"
        shape = [-1 if d is None else int(d) for d in var.shape]
        dtype = tf.as_dtype(var.dtype).name
        if plan is None:
            refuse(f"worker {self._ctx.task_index}: the script trains '{name}', which the plan does not name "
                   f"(planned: {', '.join(list(self._plans)[:5])}{', ...' if len(self._plans) > 5 else ''}). "
                   "A script must build the same model on every worker; read ADRUN_WORKER_INDEX only to choose data.")
        changed = [f"{what} {old} -> {new}" for what, old, new in
                   (("shape", plan.shape, shape), ("dtype", plan.dtype, dtype), ("grad", plan.grad, kind)) if old != new]
        if changed:
            refuse(f"worker {self._ctx.task_index}: '{name}' is not as planned: {', '.join(changed)}. "
                   "Plan again for this script.")
        return plan


def ordered(grad: Any) -> Any:
    """`grad` read again under the caller's control dependencies."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(tf.identity(grad.values), tf.identity(grad.indices), grad.dense_shape)
    return tf.identity(grad)


def value_of(grad: Any) -> tf.Tensor:
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad
