"""Rewrites one `apply_gradients` call according to the plan.

Per variable, the gradient the optimizer applies is replaced by its synchronized form:
- all-reduce: the collective mean (every worker updates its own replica);
- PS, synchronous (`sync: true, staleness: 0`): the mean taken from the PS accumulator; only the
  chief applies these updates, once every worker has pushed its gradient;
- PS, bounded staleness (`staleness: s > 0`) or asynchronous (`sync: false`): the worker's own
  gradient, applied to the PS variable by every worker as it arrives (with a bound of s steps
  between the fastest and the slowest worker for bounded staleness).

The chief runs the optimizer's whole step, then releases the other workers. A non-chief worker
pushes its synchronous gradients, runs its own updates (replicas, asynchronous PS variables), tells
the chief it is done (so state the optimizer updates once per step, like Adam's beta powers or
global_step, changes only after every worker used it), and waits for the chief's release. Steps
without collectives exchange these signals through token queues on PS 0 (`ps_sync.StepTokens`);
steps that also all-reduce exchange them through collective barriers (`step_order`), and then
every worker ends such a step with the barrier.

A job of one worker exchanges nothing: the mean over its workers is its own gradient, so it applies
every gradient itself, with no accumulator, collective, token or barrier in its step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from adrun.strategies.document import PSSync
from adrun.task_context import TaskContext
from adrun.runtime.grads import is_sparse, records_for, variable_name
from adrun.runtime.kernels.allreduce_sync import Collectives
from adrun.runtime.kernels.devices import own_device, ps_device
from adrun.runtime.kernels.distinct_rows import merged_rows
from adrun.runtime.kernels.exchange_rounds import round_order
from adrun.runtime.kernels.placement import variable_devices
from adrun.runtime.kernels.pooled_bags import pool_gradients
from adrun.runtime.kernels.ps_prefetch import PrefetchedVariable, chunks, prefetchable
from adrun.runtime.kernels.ps_sync import StalenessBarrier, StepTokens, ps_aggregations
from adrun.runtime.kernels.step_order import CollectiveStepOrder
from adrun.runtime.kernels.upstream import upstream_ops


class PlanMismatchError(RuntimeError):
    """The script's graph is not the graph the plan was made for."""


def _update_scope(new_ops: list[tf.Operation], names: list[str]) -> str:
    """The optimizer call's name scope: what precedes `update_<variable>/` in its update ops."""
    for op in new_ops:
        for name in names:
            at = op.name.find(f"update_{name}/")
            if at > 0:
                return op.name[: at - 1]
    raise PlanMismatchError(f"found no update ops of {names[:3]} in the optimizer's step")


def update_ops_by_variable(new_ops: list[tf.Operation], scope: str, names: list[str]) -> dict[str, list[tf.Operation]]:
    """The ops that end each variable's update inside one `apply_gradients` call.

    tf.compat.v1 optimizers build each variable's update under `<scope>/update_<variable>/`; the
    ops of that block that something outside it waits on are the update's end points.
    """
    result: dict[str, list[tf.Operation]] = {}
    for name in names:
        prefix = f"{scope}/update_{name}/"
        block = [op for op in new_ops if op.name.startswith(prefix)]
        block_names = {op.name for op in block}
        ends = [
            op for op in block
            if any(c.name not in block_names for c in op._control_outputs)
            or any(c.name not in block_names for out in op.outputs for c in out.consumers())
        ]
        result[name] = ends or block[-1:]
    return result


def _finish_ops(new_ops: list[tf.Operation], updates: list[tf.Operation], scope: str) -> list[tf.Operation]:
    """Ops after the per-variable updates (optimizer-wide state, global_step): control consumers
    of the updates outside every `update_` block."""
    update_names = {op.name for op in updates}
    return [
        op for op in new_ops
        if not op.name.startswith(f"{scope}/update_")
        and any(c.name in update_names for c in op.control_inputs)
    ]


_VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")


def _variables_touched(ops: list[tf.Operation]) -> set[str]:
    """Variables that `ops` take as an input (a resource handle or a ref): read or written."""
    return {t.op.name for op in ops for t in op.inputs if t.op.type in _VARIABLE_OPS}


def _reads_before(ops: list[tf.Operation], variables: set[str], skip: set[str]) -> bool:
    """Whether any op that `ops` depend on (data or control, themselves included, `skip` excluded)
    takes one of `variables` as an input."""
    return any(t.op.type in _VARIABLE_OPS and t.op.name in variables
               for op in upstream_ops(ops, skip=skip) for t in op.inputs)


def _after_updates(new_ops: list[tf.Operation], updates: list[tf.Operation], scope: str) -> list[tf.Operation]:
    """The optimizer's ops outside the per-variable updates that run after them (its finish step
    and what waits on it, e.g. the global_step increment), in creation order."""
    after = {op.name for op in updates}
    found = []
    for op in new_ops:  # creation order: an op's inputs come before it
        if op.name.startswith(f"{scope}/update_"):
            continue
        if any(t.op.name in after for t in op.inputs) or any(c.name in after for c in op.control_inputs):
            after.add(op.name)
            found.append(op)
    return found


def _finish_waits_for_own_updates(after_updates: list[tf.Operation], own_updates: list[tf.Operation]) -> bool:
    """Whether the optimizer's finish step must wait until every worker has applied its own
    updates: only when those updates, or anything they depend on in the step, use state that the
    ops after the updates (`_after_updates`: global_step, Adam's beta powers) change. A plain SGD
    step's own updates read no global_step, and the wait would only add a round between all
    workers to the step. Every worker builds the same graph, so every worker decides alike (in a
    step with collectives the wait is a collective barrier: all or none)."""
    state = _variables_touched(after_updates)
    return bool(state) and _reads_before(own_updates, state, {op.name for op in after_updates})


def updates_read_finish_state(new_ops: list[tf.Operation], names: list[str]) -> bool | None:
    """Whether the updates of `names` built by one `apply_gradients` call (`new_ops`, the ops it
    created) read state the optimizer's finish step changes: the runtime's own decision
    (`_finish_waits_for_own_updates`) with every variable's update a worker's own. Capture records
    it (`GraphItem.updates_read_step_state`) so the cost model charges the barrier the runtime will
    build: a learning rate decayed by global_step makes even plain SGD's updates read it. None when
    the call has no `update_<variable>` blocks to analyse."""
    try:
        scope = _update_scope(new_ops, names)
    except PlanMismatchError:
        return None
    updates = [u for us in update_ops_by_variable(new_ops, scope, names).values() for u in us]
    return _finish_waits_for_own_updates(_after_updates(new_ops, updates, scope), updates)


def _local_finish_ops(
    optimizer: Any, graph: tf.Graph, ctx: TaskContext, finish: list[tf.Operation], chief_only: list[tf.Operation]
) -> list[tf.Operation]:
    """A non-chief's share of the optimizer's finish step (e.g. Adam's beta powers).

    When that optimizer-wide state is replicated on this worker (tf.compat.v1 optimizers colocate
    it with the first variable by name, which may be an all-reduced one), every worker must advance
    its own copy once per step; the chief-only PS updates are cut out of its control inputs here.
    When the state lives on a PS, the chief alone advances it: nothing to run.
    """
    non_slot = optimizer._non_slot_variables() if hasattr(optimizer, "_non_slot_variables") else []
    devices = variable_devices(graph, ctx)
    here = own_device(ctx)
    if not non_slot or any(devices.get(v.op.name) != here for v in non_slot):
        return []
    _without_control_inputs(finish, chief_only)
    return finish


def poolable_shard(ctx: TaskContext, name: str) -> bool:
    """Whether a lookup's shard `name` can take its gradient rows formed on its PS task: pushed to
    a PS accumulator or applied on the PS (sync, bounded staleness, async) by one of several workers,
    read from the PS itself (no local proxy), and its plan does not say `pool_bags: false`."""
    sync = ctx.plan.synchronizer(name)
    return (ctx.num_workers > 1 and isinstance(sync, PSSync) and not sync.local_proxy and sync.pool_bags)


def synchronized_apply(
    optimizer: Any,
    apply: Callable[..., tf.Operation],
    grads_and_vars: list[tuple[Any, Any]],
    ctx: TaskContext,
    call_index: int,
) -> tf.Operation:
    n = ctx.num_workers
    synced: dict[str, Any] = {}
    pushes: list[tf.Operation] = []
    bsp_vars: list[str] = []  # PS, fully synchronous: the chief applies
    bsp_grads: list[tuple[str, Any, int]] = []  # their (variable, gradient, PS task)
    bsp_cacheable: list[tuple[str, Any, int]] = []  # those a worker may cache: (variable, var, PS task)
    own_update_vars: list[str] = []  # replicas and async PS variables: every worker applies
    staleness_bounds: list[int] = []
    dense_ar: list[tuple[str, Any, tf.Tensor]] = []
    all_reduced: list[str] = []
    collectives = Collectives(n)
    here = own_device(ctx)
    graph = tf.compat.v1.get_default_graph()
    pooled = pool_gradients(graph, grads_and_vars, variable_devices(graph, ctx), lambda v: poolable_shard(ctx, v), here) \
        if ctx.plan.uses_ps and n > 1 else {}
    for grad, var in grads_and_vars:
        if grad is None:
            continue
        name = variable_name(var)
        sync = ctx.plan.synchronizer(name)
        if sync is None:
            raise PlanMismatchError(
                f"variable '{name}' is trained by the script but not in the strategy plan "
                f"({ctx.strategy_file}); the script's graph differs from the one captured"
            )
        grad = pooled.get(name, grad)
        if sync.kind == "ps" and sync.sync and sync.staleness == 0 and n > 1:
            bsp_grads.append((name, grad, sync.ps_task))
            bsp_vars.append(name)
            if not sync.local_proxy and prefetchable(var, grad):
                bsp_cacheable.append((name, var, sync.ps_task))
            continue
        own_update_vars.append(name)
        if sync.kind == "ps":
            if sync.staleness:
                staleness_bounds.append(sync.staleness)
            if name in pooled:
                synced[name] = grad  # its rows formed on the PS
            elif is_sparse(grad) and n > 1:  # one worker applies its gradient as the plain run does
                synced[name] = merged_rows(grad, here)  # each distinct row crosses to the PS once
            continue
        all_reduced.append(name)
        if is_sparse(grad):
            synced[name] = collectives.sparse_mean(name, grad, here)
        else:
            dense_ar.append((name, sync, grad))
    synced.update(collectives.dense_means(dense_ar))
    # a step with collectives must not wait on PS queues (step_order.py): no prefetching there
    prefetched = [] if all_reduced else [
        PrefetchedVariable(var, name, ps_device(task), here, ctx.task_index, n) for name, var, task in chunks(bsp_cacheable)
    ]
    for aggregation in ps_aggregations(bsp_grads, n, here, round_order(ctx, graph), pooled=pooled.keys()):
        pushes.append(aggregation.push)
        if ctx.is_chief:
            synced.update(aggregation.take_means())

    records = records_for(graph)
    records.setup_ops.extend(collectives.internal_initializers)
    records.setup_ops.extend(init for p in prefetched for init in p.initializers)
    records.wire_bytes_per_step += collectives.wire_bytes
    before = len(graph.get_operations())
    new_pairs = [(synced.get(variable_name(v), g) if g is not None else g, v) for g, v in grads_and_vars]
    train_op = apply(new_pairs)
    # with accumulators or collectives in the step every worker already waits for all the others
    if staleness_bounds and not bsp_vars and not all_reduced and n > 1:
        barrier = StalenessBarrier(call_index, n, min(staleness_bounds))
        if ctx.is_chief:
            records.chief_setup_ops.append(barrier.initial_tokens())
        train_op = barrier.after_step(ctx.task_index, train_op)
    trains_on_ps = len(bsp_vars) + len(own_update_vars) > len(all_reduced)
    mixed = n > 1 and bool(all_reduced) and trains_on_ps  # ordered by collectives, see step_order.py
    if n == 1 or not (bsp_vars or mixed):
        return train_op
    order = CollectiveStepOrder(collectives, call_index) if mixed else StepTokens(call_index, n)
    if not bsp_vars:
        return order.end_step(ctx.task_index, [train_op])

    new_ops = graph.get_operations()[before:]
    scope = _update_scope(new_ops, bsp_vars + own_update_vars)
    updates = update_ops_by_variable(new_ops, scope, bsp_vars + own_update_vars)
    finish = _finish_ops(new_ops, [u for us in updates.values() for u in us], scope)
    own_updates = [u for name in own_update_vars for u in updates[name]]
    # optimizer-wide state changes only once every worker has applied its own updates
    after_updates = _after_updates(new_ops, [u for us in updates.values() for u in us], scope)
    wait = bool(own_update_vars) and _finish_waits_for_own_updates(after_updates, own_updates)
    # A mixed step's end barrier (step_order.py) keeps any worker's step from ending, and cleaning
    # its step id up on the PS tasks, while another still has work there: the chief's PS updates,
    # the others' pushes. The replicas' updates run on each worker's own task after the all-reduce,
    # and a worker's all-reduce ends only once its peers took every piece it sends: so they run
    # beside the barrier, which then completes while the all-reduce (the step's longest phase)
    # still runs instead of adding its N - 1 sequential transfers after it (docs/performance.md,
    # "The end barrier beside the all-reduce"). Not when the optimizer's finish step changes state
    # those updates read (Adam's beta powers: `wait`), which must follow every worker's updates.
    beside = [u for name in all_reduced for u in updates[name]] if mixed and not wait else []
    if ctx.is_chief:
        if wait:
            applied = order.own_updates_applied(ctx.task_index, own_updates)
            for op in finish:
                op._add_control_input(applied)
        _without_control_inputs(finish, beside)
        pulls = [op for p in prefetched for op in p.chief_after_update(updates[p.name])]
        return _beside(order.end_step(ctx.task_index, [train_op, *pulls]), beside)
    pushes += [p.worker_pull() for p in prefetched]
    if own_update_vars:
        chief_only = [u for name in bsp_vars for u in updates[name]]
        local_finish = _local_finish_ops(optimizer, graph, ctx, finish, chief_only)
        own_updates += local_finish
        if wait:
            pushes.append(order.own_updates_applied(ctx.task_index, own_updates))
        elif beside:
            beside += local_finish  # they wait for the replicas' updates
            pushes += [u for u in own_updates if u not in beside]
        else:
            pushes += own_updates
    return _beside(order.end_step(ctx.task_index, pushes), beside)


def _without_control_inputs(ops: Sequence[tf.Operation], cut: Sequence[tf.Operation]) -> None:
    """Drop `cut` from the control inputs of `ops` (a non-chief's finish step does not wait for the
    chief-only PS updates; the chief's no longer waits for the replicas' updates: the step op waits
    for them itself, `_beside`). TF has no public call for it: the private Operation methods are
    checked on the pinned TF by tests/unit/adrun/runtime/kernels/test_gradient_sync.py."""
    names = {op.name for op in cut}
    for op in ops:
        kept = [c for c in op.control_inputs if c.name not in names]
        if len(kept) != len(op.control_inputs):
            op._remove_all_control_inputs()
            op._add_control_inputs(kept)


def _beside(step: tf.Operation, ops: list[tf.Operation]) -> tf.Operation:
    """The step op: `step` and `ops`, run side by side."""
    return tf.group(step, *ops, name="adrun_step_and_replicas") if ops else step
