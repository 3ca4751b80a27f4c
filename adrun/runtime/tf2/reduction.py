"""The mean over the workers of one apply's gradients, with the same mathematics as graph mode.

Each apply first gathers, in one small collective, a hash of what it reduces and the row counts of
its sparse gradients (`same_on_every_worker`): the workers' steps are checked to be the same, and the
sparse gathers below need those counts anyway (graph mode gathers each gradient's count alone).
Dense gradients go through graph mode's grouping and compressors (`kernels/allreduce_sync.py`,
`kernels/compression.py`: one fused buffer per plan group, dtype and compressor; fp16, fp16-ef,
powersgd) under instance keys fixed per collective (`keys.py`). A partitioned variable's gradient is cut into the
plan's shards, each reduced in its own group (PartitionedAR), and joined again. Sparse gradients are
all-gathered (`gathered_rows`): for an optimizer that applies them only through their rows summed
per index (duplicate_rows.py: SGD, Lion, every tf_keras optimizer, when unclipped) each worker first
sums its rows of equal index, as graph mode does; for the others (Keras 3's Adam squares each row)
row for row, since only the very rows one process would have seen give the same step. Each
collective runs on the device and in the group routes.py gives its dtype (NCCL for floating-point
tensors when the job runs on GPUs).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from adrun.runtime.kernels.allreduce_sync import Collectives, gathered_rows
from adrun.runtime.tf2.broadcast import internal
from adrun.runtime.tf2.duplicate_rows import summed_per_index
from adrun.runtime.tf2.keys import StepKeys
from adrun.runtime.tf2.routes import Route, Routes
from adrun.strategies.document import AllReduceSync, PSSync, VariablePlan, shard_sizes


@dataclass
class TF2Collectives(Collectives):
    """Graph mode's collectives with step keys and ordering tokens (keys.py) and a device per dtype
    (`routes`, decided at the first collective); compressor state made once per name, eagerly,
    on this worker only. No collective carries a timeout of its own: TF would start a thread per
    call to keep it; the step's deadline keeps ADRUN_OP_TIMEOUT instead (step_deadline.py). A run of
    one worker has neither keys nor routes and never reaches a collective."""

    keys: StepKeys | None = None
    routes: Callable[[], Routes] | None = None
    count_slots: int = 0  # row counts an apply's check carries: the plan's sparse variables (the same on every worker)
    _state: dict[str, tf.Variable] = field(default_factory=dict)

    def _route(self, t: tf.Tensor, label: str) -> tuple[Route, str, dict[str, Any]]:
        """`t`'s route, its device and the collective's key and token."""
        if self.keys is None or self.routes is None:
            raise RuntimeError("TF2Collectives: a collective op in a run of one worker (no keys, no routes)")
        routes = self.routes()
        route = routes.of(t.dtype.base_dtype.name)
        device = routes.device(route)
        label = self.keys.label(label)
        return route, device, {"instance_key": self.keys.instance_key(label, t),
                               "ordering_token": self.keys.ordering_token(device, label)}

    def _reduce(self, t: tf.Tensor, label: str, final_op: str) -> tf.Tensor:
        route, device, key = self._route(t, label)
        with tf.device(device):
            return tf.raw_ops.CollectiveReduceV2(
                input=t, group_size=self.num_workers, group_key=route.group_key, merge_op="Add", final_op=final_op,
                communication_hint=route.communication_hint, **key,
            )

    def gather(self, t: tf.Tensor, label: str, step: Any = None) -> tf.Tensor:
        route, device, key = self._route(t, label)
        with tf.device(device):
            return tf.raw_ops.CollectiveGatherV2(
                input=t, group_size=self.num_workers, group_key=route.group_key,
                communication_hint=route.communication_hint, **key,
            )

    def same_on_every_worker(self, applied: str, counts: list[tf.Tensor]) -> tuple[tf.Operation | None, list[Any]]:
        """The check that every worker's apply reduces what this one's does (`applied` names it): a
        worker whose step has other collectives would otherwise wait for partners that never come.
        One gather of a hash of `applied` and of the row counts of the apply's sparse gradients
        (`counts`, int64 [1] each), zero-padded to `count_slots` so that every worker's has one shape
        and one key whatever it applies. Returns an op that fails the step, saying so, unless every
        worker's hash is this one's (None eagerly, where it has run, and for one worker), and per
        count the workers' counts, read after that op, or None past the slots (a gradient given
        twice in one apply): that gradient's gather counts its rows itself. Build it before the
        apply's other collectives: an eager apply then checks before it reduces."""
        if self.num_workers == 1:
            return None, [None] * len(counts)
        carried = counts[:self.count_slots]
        mine = tf.constant([zlib.crc32(applied.encode())], tf.int64)
        header = tf.concat([mine, *carried, tf.zeros([self.count_slots - len(carried)], tf.int64)], 0)
        with tf.name_scope("adrun_same_step"):
            every = tf.reshape(self.gather(header, "adrun/same_step"), [self.num_workers, 1 + self.count_slots])
            checked = tf.debugging.assert_equal(
                every[:, 0], tf.tile(mine, [self.num_workers]), summarize=self.num_workers,
                message=(f"adrun: the optimizer steps of the workers differ: every worker must apply gradients to the "
                         f"same variables, of the same kinds, in the same order of applies. This apply reduces "
                         f"{_shortened(applied)}; hashes of the applies of the workers (in worker order), and of this one:"),
            )
            with tf.control_dependencies([] if checked is None else [checked]):
                gathered = [tf.identity(every[:, 1 + j]) for j in range(len(carried))]
        return checked, gathered + [None] * (len(counts) - len(carried))

    def state_variable(self, initial: Callable[[], tf.Tensor], name: str) -> tf.Variable:
        var = self._state.get(name)
        if var is None:
            with tf.init_scope(), internal():
                var = self._state[name] = tf.Variable(initial(), trainable=False, name=name.replace("#", "_"))
        return var

    def rows_to_gather(self, grad: tf.IndexedSlices, sum_per_index: bool) -> tf.IndexedSlices:
        """The rows of `grad` this worker sends: with `sum_per_index` its rows of equal index summed
        (rows of different workers with equal index stay apart); one worker sends nothing."""
        if self.num_workers == 1 or not sum_per_index:
            return grad
        with tf.name_scope("adrun_allgather"):
            return summed_per_index(grad)

    def sparse_rows(self, name: str, grad: tf.IndexedSlices, counts: tf.Tensor | None) -> tf.IndexedSlices:
        """Every worker's rows of `grad` (from `rows_to_gather`), values divided by N; `counts`: the
        workers' row counts when the apply's check carried them, else gathered here."""
        if self.num_workers == 1:
            return grad
        with tf.name_scope("adrun_allgather"):
            return gathered_rows(grad, self.num_workers, lambda t, part: self.gather(t, f"{name}/{part}"), counts=counts)


def _shortened(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def mean_gradients(collectives: TF2Collectives, planned: list[tuple[VariablePlan, Any]], sum_per_index: bool,
                   applied: str) -> tuple[list[Any], tf.Operation | None]:
    """The mean over workers of each (plan, gradient), in order, and the op that fails the step unless
    every worker's apply is this one's (`applied` names it; same_on_every_worker); `sum_per_index`:
    whether the optimizer takes sparse gradients only through their rows summed per index
    (duplicate_rows.py)."""
    sparse = {i: collectives.rows_to_gather(grad, sum_per_index)
              for i, (_, grad) in enumerate(planned) if isinstance(grad, tf.IndexedSlices)}
    checked, counts = collectives.same_on_every_worker(
        applied, [tf.shape(grad.indices, out_type=tf.int64)[:1] for grad in sparse.values()])
    dense: list[tuple[str, AllReduceSync, tf.Tensor]] = []
    pieces: dict[int, list[str]] = {}  # position -> names of its shards in `dense`
    axes: dict[int, int] = {}  # position of a partitioned gradient -> the axis its shards join on
    out: list[Any] = [None] * len(planned)
    for (i, grad), gathered in zip(sparse.items(), counts, strict=True):
        # a gradient past the check's slots gathers its own counts: only once every worker passed it
        with tf.control_dependencies([checked] if gathered is None and checked is not None else []):
            out[i] = collectives.sparse_rows(planned[i][0].name, grad, gathered)
    for i, (plan, grad) in enumerate(planned):
        if i in sparse:
            continue
        if plan.partition is None:
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
    return out, checked


def _all_reduce(name: str, sync: PSSync | AllReduceSync | None) -> AllReduceSync:
    """`sync`, which an all-reduce plan's dense gradient always has (planning refuses a TF2 plan that
    mixes PS and all-reduce: strategies/document.py, tf2_refusals)."""
    if not isinstance(sync, AllReduceSync):
        raise RuntimeError(f"'{name}': a TF2 plan must all-reduce a dense gradient; it says {sync!r}")
    return sync
