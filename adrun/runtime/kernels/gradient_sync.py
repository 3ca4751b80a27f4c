"""Rewrites one `apply_gradients` call according to the plan: synchronized gradients in, a
role-specific training step out.

Chief: gradients are synchronized (PS take / all-reduce), the optimizer's own update runs on them,
then the other workers are released. Non-chief with PS variables: push gradients, wait for the
chief's release; the chief alone applies PS updates (and advances `global_step` once per step).
With all-reduce only, every worker applies the same averaged gradient to its own replica.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from adrun.runtime.context import TaskContext
from adrun.runtime.grads import is_sparse, variable_name
from adrun.runtime.kernels.allreduce_sync import all_gather_sparse_mean, all_reduce_dense_groups
from adrun.runtime.kernels.ps_sync import PSAggregation, StepTokens


class PlanMismatchError(RuntimeError):
    """The script's graph is not the graph the plan was made for."""


def synchronized_apply(
    apply: Callable[..., tf.Operation],
    grads_and_vars: list[tuple[Any, Any]],
    ctx: TaskContext,
    call_index: int,
    **apply_kwargs: Any,
) -> tf.Operation:
    plans = {v.name: v for v in ctx.strategy.variables}
    n = ctx.num_workers
    synced: dict[str, Any] = {}
    pushes: list[tf.Operation] = []
    ps_takes: list[tuple[str, PSAggregation]] = []
    dense_ar: list[tuple[str, int, tf.Tensor]] = []
    for grad, var in grads_and_vars:
        if grad is None:
            continue
        name = variable_name(var)
        plan = plans.get(name)
        if plan is None:
            raise PlanMismatchError(
                f"variable '{name}' is trained by the script but not in the strategy plan "
                f"({ctx.strategy_file}); the script's graph differs from the one captured"
            )
        sync = plan.sync
        if sync.kind == "ps":
            agg = PSAggregation(name, grad, sync.ps_task, n)
            pushes.append(agg.push)
            ps_takes.append((name, agg))
        elif is_sparse(grad):
            synced[name] = all_gather_sparse_mean(name, grad, n)
        else:
            dense_ar.append((name, sync.group, grad))
    synced.update(all_reduce_dense_groups(dense_ar, n))

    if not ps_takes:
        new_pairs = [(synced.get(variable_name(v), g) if g is not None else g, v) for g, v in grads_and_vars]
        return apply(new_pairs, **apply_kwargs)

    if any(p.sync.kind != "ps" for p in plans.values()):
        raise PlanMismatchError("mixing PS and all-reduce synchronizers in one plan is not supported yet")

    tokens = StepTokens(call_index, n)
    if ctx.is_chief:
        synced.update({name: agg.take_mean() for name, agg in ps_takes})
        new_pairs = [(synced.get(variable_name(v), g) if g is not None else g, v) for g, v in grads_and_vars]
        return tokens.release_all(apply(new_pairs, **apply_kwargs))
    # Build the optimizer's ops anyway (slots, names and checkpoints match the chief's graph),
    # but this worker's step only pushes gradients and waits for the chief.
    apply(grads_and_vars, **apply_kwargs)
    return tokens.wait_own(ctx.task_index, pushes)
