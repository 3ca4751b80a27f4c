"""The mean over the workers of one apply's gradients, with the same mathematics as graph mode.

Dense gradients go through graph mode's grouping and compressors (`kernels/allreduce_sync.py`,
`kernels/compression.py`: one fused buffer per plan group, dtype and compressor; fp16, fp16-ef,
powersgd) under run-time instance keys (`keys.py`). A partitioned variable's gradient is cut into the
plan's shards, each reduced in its own group (PartitionedAR), and joined again. Sparse gradients are
all-gathered (`gathered_rows`): for an optimizer that applies them only through their rows summed
per index (duplicate_rows.py: SGD, Lion, every tf_keras optimizer, when unclipped) each worker first
sums its rows of equal index, as graph mode does; for the others (Keras 3's Adam squares each row)
row for row, since only the very rows one process would have seen give the same step. Each
collective runs on the device and in the group routes.py gives its dtype (NCCL for floating-point
tensors when the job runs on GPUs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from adrun.runtime.kernels.allreduce_sync import Collectives, gathered_rows
from adrun.runtime.tf2.broadcast import internal
from adrun.runtime.tf2.duplicate_rows import summed_per_index
from adrun.runtime.tf2.keys import RuntimeKeys
from adrun.runtime.tf2.routes import Route, Routes
from adrun.strategies.document import AllReduceSync, PSSync, VariablePlan, shard_sizes


@dataclass
class TF2Collectives(Collectives):
    """Graph mode's collectives with run-time instance keys, one ordering token and a device per
    dtype (`routes`, decided at the first collective); compressor state made once per name, eagerly,
    on this worker only. No collective carries a timeout of its own: TF would start a thread per
    call to keep it; the step's deadline keeps ADRUN_OP_TIMEOUT instead (step_deadline.py). A run of
    one worker has neither keys nor routes and never reaches a collective."""

    keys: RuntimeKeys | None = None
    routes: Callable[[], Routes] | None = None
    _state: dict[str, tf.Variable] = field(default_factory=dict)

    def _route(self, t: tf.Tensor) -> tuple[RuntimeKeys, Route, str]:
        """The keys, `t`'s route and its device."""
        if self.keys is None or self.routes is None:
            raise RuntimeError("TF2Collectives: a collective op in a run of one worker (no keys, no routes)")
        routes = self.routes()
        route = routes.of(t.dtype.base_dtype.name)
        return self.keys, route, routes.device(route)

    def _reduce(self, t: tf.Tensor, label: str, final_op: str) -> tf.Tensor:
        keys, route, device = self._route(t)
        with tf.device(device):
            return tf.raw_ops.CollectiveReduceV2(
                input=t, group_size=self.num_workers, group_key=route.group_key, instance_key=keys.next(),
                ordering_token=keys.ordering_token(device), merge_op="Add", final_op=final_op,
                communication_hint=route.communication_hint,
            )

    def gather(self, t: tf.Tensor, label: str, step: Any = None) -> tf.Tensor:
        keys, route, device = self._route(t)
        with tf.device(device):
            return tf.raw_ops.CollectiveGatherV2(
                input=t, group_size=self.num_workers, group_key=route.group_key, instance_key=keys.next(),
                ordering_token=keys.ordering_token(device), communication_hint=route.communication_hint,
            )

    def state_variable(self, initial: Callable[[], tf.Tensor], name: str) -> tf.Variable:
        var = self._state.get(name)
        if var is None:
            with tf.init_scope(), internal():
                var = self._state[name] = tf.Variable(initial(), trainable=False, name=name.replace("#", "_"))
        return var

    def sparse_rows(self, name: str, grad: tf.IndexedSlices, sum_per_index: bool) -> tf.IndexedSlices:
        """Every worker's rows of `grad`, values divided by N; with `sum_per_index` each worker's rows
        of equal index summed first (rows of different workers with equal index stay apart)."""
        if self.num_workers == 1:
            return grad
        with tf.name_scope("adrun_allgather"):
            if sum_per_index:
                grad = summed_per_index(grad)
            return gathered_rows(grad, self.num_workers, lambda t, part: self.gather(t, f"{name}/{part}"))


def mean_gradients(collectives: TF2Collectives, planned: list[tuple[VariablePlan, Any]],
                   sum_per_index: bool) -> list[Any]:
    """The mean over workers of each (plan, gradient), in order; `sum_per_index`: whether the
    optimizer takes sparse gradients only through their rows summed per index (duplicate_rows.py)."""
    dense: list[tuple[str, AllReduceSync, tf.Tensor]] = []
    pieces: dict[int, list[str]] = {}  # position -> names of its shards in `dense`
    axes: dict[int, int] = {}  # position of a partitioned gradient -> the axis its shards join on
    out: list[Any] = [None] * len(planned)
    for i, (plan, grad) in enumerate(planned):
        if isinstance(grad, tf.IndexedSlices):
            out[i] = collectives.sparse_rows(plan.name, grad, sum_per_index)
        elif plan.partition is None:
            dense.append((plan.name, _all_reduce(plan.name, plan.sync), grad))
            pieces[i] = [plan.name]
        else:
            axis = axes[i] = plan.partition.axis
            sizes = shard_sizes(grad.shape[axis], len(plan.partition.shards))
            names = plan.shard_names()
            for name, sync, part in zip(names, plan.partition.shards, tf.split(grad, sizes, axis=axis), strict=True):
                dense.append((name, _all_reduce(name, sync), part))
            pieces[i] = names
    if dense:
        means = collectives.dense_means(dense)
        for i, names in pieces.items():
            parts = [means[n] for n in names]
            out[i] = parts[0] if len(parts) == 1 else tf.concat(parts, axis=axes[i])
    return out


def _all_reduce(name: str, sync: PSSync | AllReduceSync | None) -> AllReduceSync:
    """`sync`, which an all-reduce plan's dense gradient always has (planning refuses a TF2 plan that
    mixes PS and all-reduce: strategies/document.py, tf2_refusals)."""
    if not isinstance(sync, AllReduceSync):
        raise RuntimeError(f"'{name}': a TF2 plan must all-reduce a dense gradient; it says {sync!r}")
    return sync
