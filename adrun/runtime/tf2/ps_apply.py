"""Run mode's hook for a TF2 parameter-server plan: graph mode's PS protocols at the optimizer's apply.

The variables are shared on the PS tasks (ps_variables.py), so an apply updates everyone's copy:
- synchronous (`sync: true, staleness: 0`): every worker pushes its gradient into the variable's
  PS, a split variable's each shard's part into that shard's PS (ps_exchange.py: dense sums divided by N, sparse rows gathered in worker order and divided by
  N); the chief takes the mean over all N, applies it with the script's own
  optimizer, and then gives each other worker its release token. A sparse gradient is pushed and
  applied with its rows summed per id when the optimizer takes only those sums (duplicate_rows.py,
  the all-reduce path's rule), row for row otherwise. The other workers do not apply:
  their step ends when their token arrives, so their next step reads the updated variables;
- bounded staleness (`staleness: s`): every worker applies its own gradient, and staleness tokens
  (graph mode's StalenessBarrier) keep each worker within s steps of every other;
- asynchronous (`sync: false`): every worker applies its own gradient as it comes, waiting for no one.
Optimizer slots and step counts are shared on the PS too, so each of these applies updates one
optimizer state. The release (or the staleness token) is ordered after the apply's updates through a
tiny op on every updated resource: inside a `tf.function` TF orders stateful ops only per resource.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.duplicate_rows import summed_per_index, sums_duplicate_rows
from adrun.runtime.tf2.ps_exchange import GradientExchange, StalenessTokens
from adrun.runtime.tf2.ps_shards import joined, shards_of, split_gradient
from adrun.runtime.tf2.ps_updates import on_its_ps
from adrun.runtime.tf2.optimizer_hooks import traced_batch_size
from adrun.runtime.tf2.steps import StepCounters
from adrun.runtime.tf2.sync import PlanCheck, ordered, value_of
from adrun.strategies.document import PSSync, Strategy, VariablePlan, shard_sizes


def ps_mode(strategy: Strategy) -> PSSync:
    """The one PS synchronizer setting of a TF2 plan (planning refuses plans whose PS variables differ
    in sync or staleness, strategies/document.py tf2_refusals); its ps_task is the first one's. A split
    variable's shards count too: PartitionedPS may split every variable, leaving no whole-variable sync."""
    syncs = [s for v in strategy.variables for s in v.synchronizers() if isinstance(s, PSSync)]
    if not syncs:
        raise RuntimeError("a TF2 parameter-server run with no PS variable in its plan")
    return syncs[0]


def _touched(optimizer: Any, variables: list[Any]) -> list[tf.Tensor]:
    """One op per variable the apply may update (the trained ones and, given the optimizer, its own),
    ordered after the apply's updates of that resource. TF's automatic control dependencies count it
    as a write (it is not a registered read-only op), so later reads of the variable in the same
    function wait for it: a non-chief's second apply of a step (a GAN's generator after its critic)
    reads what the chief applied, not what was there before the release."""
    own = getattr(optimizer, "variables", []) if optimizer is not None else []
    own = own() if callable(own) else own
    return [gen_resource_variable_ops.var_is_initialized_op(shard.handle)
            for v in [*variables, *own] for shard in shards_of(v)]


class PSApply:
    """The AroundHook (optimizer_hooks.py) of a worker in a TF2 parameter-server plan."""

    def __init__(self, ctx: TaskContext, steps: StepCounters) -> None:
        self._ctx = ctx
        self._plan = PlanCheck(ctx)
        self._steps = steps
        self._mode = ps_mode(ctx.strategy)
        self._calls: dict[int, int] = {}  # optimizer -> its index in first-apply order (every worker's)
        self._optimizers: list[Any] = []  # kept, so their ids stay theirs
        self._barrier_filled = False

    def around(self, optimizer: Any, grads: list[Any], variables: list[Any],
               apply: Callable[[list[Any]], Any]) -> Any:
        planned = [(i, self._plan(var, grad), grad) for i, (grad, var) in enumerate(zip(grads, variables, strict=True))
                   if grad is not None]
        if not planned:
            return apply(grads)
        sums = sums_duplicate_rows(optimizer)
        grads = [_distinct(grad, sums) for grad in grads]
        planned = [(i, plan, grads[i]) for i, plan, _ in planned]
        with tf.control_dependencies([self._steps.started()]):
            planned = [(i, plan, ordered(grad)) for i, plan, grad in planned]
        call = self._call_index(optimizer)
        n, worker = self._ctx.num_workers, self._ctx.task_index
        if self._mode.sync and self._mode.staleness == 0 and n > 1:
            result, end = self._synchronous(call, optimizer, grads, variables, planned, apply, sums)
        else:
            result = apply(grads)
            end = tf.group(*_touched(optimizer, variables))
            if self._mode.staleness and n > 1:
                end = StalenessTokens(call, n, worker, self._mode.staleness).after_step(end)
        with tf.control_dependencies([end]):
            self._steps.done(None if tf.executing_eagerly() else traced_batch_size())
        return result

    def _call_index(self, optimizer: Any) -> int:
        call = self._calls.get(id(optimizer))
        if call is None:
            call = self._calls[id(optimizer)] = len(self._optimizers)
            self._optimizers.append(optimizer)
            if self._mode.staleness and self._ctx.is_chief and self._ctx.num_workers > 1:
                with tf.init_scope():
                    StalenessTokens(call, self._ctx.num_workers, 0, self._mode.staleness).fill()
        return call

    def _synchronous(self, call: int, optimizer: Any, grads: list[Any], variables: list[Any],
                     planned: list[tuple[int, Any, Any]], apply: Callable[[list[Any]], Any],
                     sums: bool) -> tuple[Any, tf.Operation]:
        """(the apply's result, the step's end) of a synchronous step: the chief applies the mean
        (with `sums`, the workers' rows of equal id summed too, so its update sends each row once)."""
        exchange = GradientExchange(call, self._ctx.num_workers, self._ctx.task_index)
        pushed = [part for _, plan, grad in planned for part in gradient_parts(plan, grad)]
        if self._ctx.task_index != 0:
            _state_like_the_chief(optimizer, variables)
            released = exchange.end_step(exchange.push(pushed))
            with tf.control_dependencies([released]):  # later reads in the same function come after
                return None, tf.group(*_touched(None, variables))
        means = exchange.means(pushed)
        out = list(grads)
        for i, plan, _ in planned:
            with on_its_ps(variables[i]):  # the mean's sum where the update runs
                out[i] = _distinct(_whole(plan, means), sums)
        with tf.control_dependencies([value_of(m) for m in means.values()]):
            result = apply(out)
        return result, exchange.end_step(_touched(optimizer, variables))


def _distinct(grad: Any, sums: bool) -> Any:
    """`grad`, a sparse one summed per id when the optimizer takes only those sums (`sums`,
    duplicate_rows.py): a batch names the same rows many times, and each row is then pushed once."""
    return summed_per_index(grad) if sums and isinstance(grad, tf.IndexedSlices) else grad


def _state_like_the_chief(optimizer: Any, variables: list[Any]) -> None:
    """A non-chief that skips the apply still creates what the chief's apply creates first, under
    the same names: tf_keras's legacy optimizers make `iter` and their slots inside
    `apply_gradients` (under the optimizer's name scope), and a later `optimizer.iterations` outside
    it would make `iter` under another name, which the chief never initializes."""
    create = getattr(optimizer, "_create_all_weights", None)  # tf_keras's legacy OptimizerV2
    if create is not None:
        with tf.name_scope(optimizer._name), tf.init_scope():
            create(variables)


def gradient_parts(plan: VariablePlan, grad: Any) -> list[tuple[str, Any, int]]:
    """What a variable's gradient pushes, as (name, gradient, PS task): a whole variable's to its PS;
    a split variable's each shard's part to that shard's PS (ps_shards.split_gradient), so the
    gradient bytes of a split variable spread over its PS tasks as its rows do."""
    tasks = [_ps_task(sync) for sync in plan.synchronizers()]
    if plan.partition is None:
        return [(plan.name, grad, tasks[0])]
    pieces = split_gradient(grad, shard_sizes(plan.shape[0], len(tasks)))
    return [(f"{plan.name}/part_{k}", piece, task) for k, (piece, task) in enumerate(zip(pieces, tasks, strict=True))]


def _whole(plan: VariablePlan, means: dict[str, Any]) -> Any:
    """The mean gradient of a whole variable from the means of its parts (`gradient_parts`)."""
    if plan.partition is None:
        return means[plan.name]
    rows = shard_sizes(plan.shape[0], len(plan.partition.shards))
    return joined(plan.shape, rows, [means[f"{plan.name}/part_{k}"] for k in range(len(rows))])


def _ps_task(sync: Any) -> int:
    if not isinstance(sync, PSSync):
        raise RuntimeError(f"a TF2 parameter-server plan holds every variable on a PS; found {sync!r}")
    return sync.ps_task
