"""Which embedding lookups of a built graph could pool their bags on the PS tasks, and which cannot.

A lookup `reduce_mean(gather(table, ids[B, L]), axis=1)` of a PS-held table moves B·L rows to the
worker and, backward, one gradient row per distinct id back; pooled on the PS, each shard
returns per-example partial sums and takes d_pooled (docs/performance.md, "Pooling bags on the PS").
This module only *finds* such lookups (at apply_gradients, with the optimizer's gradients built,
and at session set-up):
forward, the gathers of the table (one per shard of a partitioned one), the ids and the reduction;
backward, d_pooled and the ops TF's gradient functions made from it down to each IndexedSlices that
apply_gradients received. The rewrite that uses it is pooled_bags.py; nothing here changes the graph.

The chains are the ones TF's private gradient functions make (`math_grad._MeanGrad`, `_SumGrad`,
`_SparseSegment*Grad`, `resource_variable_ops._GatherGrad`, `data_flow_grad._DynamicStitchGrads`,
declared in versions.py); a chain of another shape is refused, never guessed at.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from adrun.runtime.kernels.distinct_rows import colocated_with_any, in_control_flow
from adrun.runtime.kernels.partitioning import CONTROL_FLOW_OPS, made_by_tf_gradients, reduced_on_the_way


class Kind(enum.Enum):
    MEAN = "mean"
    SUM = "sum"
    SQRTN = "sqrtn"


_DENSE_KINDS = {"Mean": Kind.MEAN, "Sum": Kind.SUM}
_SPARSE_KINDS = {"SparseSegmentMean": Kind.MEAN, "SparseSegmentSum": Kind.SUM, "SparseSegmentSqrtN": Kind.SQRTN}
_PASS_THROUGH = {"Identity"}
_ID_WALK_LIMIT = 32  # ops between a partitioned lookup's shard ids and its flattened ids (7 in TF 2.21)

MAX_NORM = "its rows are used next to the table (embedding_lookup's max_norm clips them there)"
WEIGHTED = "its rows are weighted per id (sp_weights or a mask) before the reduction"
OTHER_CONSUMER = "the gathered rows have a consumer other than one bag reduction"
REDUCED_ON_THE_WAY = "its gradient passes a reduction (e.g. clip_by_global_norm) on its way to the update"
CONTROL_FLOW = "the lookup is inside control flow"
RANK = "the gathered rows are not of rank 3 [batch, bag, dim]"
OTHER_AXIS = "the reduction is not over the bag axis (1) alone"
NOT_ON_PS = "the table is not on a PS task"
GRADIENT_CHAIN = "its gradient does not reach the update as the reduction's gradient through the gather's"
DTYPE = "its table is neither float32 nor float64 (TF sums half-precision bags in its own way, which the PS's sums would not match)"

# TF sums a bfloat16 bag (Mean, Sum, SparseSegment*) and a float16 one (SparseSegment*) in float32 and
# rounds once; a float16 Mean in yet another order. Sums taken on the PS in the table's dtype would
# differ (a mean of 600 bfloat16 rows: 0.213 for TF's 0.301), so only these are pooled.
_POOLED_DTYPES = (tf.float32, tf.float64)


@dataclass(frozen=True)
class ShardGather:
    variable: str  # the VarHandleOp's name (the whole variable's, or one shard's)
    gather: tf.Operation  # its ResourceGather
    gradient: tf.IndexedSlices | None  # what apply_gradients received for it, None when not trained


@dataclass(frozen=True)
class PooledBackward:
    d_pooled: tf.Tensor  # the reduction's incoming gradient, [batch, dim] (or [batch, 1, dim] with keep_dims)


@dataclass(frozen=True)
class PooledLookup:
    shards: tuple[ShardGather, ...]  # one for a whole variable, one per shard of a partitioned one
    ids: tf.Tensor  # [batch, bag] for a dense lookup; the distinct ids (Unique's) for a sparse one
    segment_ids: tf.Tensor | None  # a sparse lookup's example of each id (its SparseSegment* input); else None
    reduction: tf.Operation
    kind: Kind
    bag_axis: int | None  # 1 for a dense lookup; None for a sparse one (bags are segments)
    backward: PooledBackward | None  # None for a table read but not trained


@dataclass(frozen=True)
class RefusedLookup:
    ops: tuple[tf.Operation, ...]  # the gathers; for a lookup inside a control-flow op, that op
    reason: str


@dataclass(frozen=True)
class Matches:
    pooled: tuple[PooledLookup, ...]
    refused: tuple[RefusedLookup, ...]


class _Refused(Exception):
    pass


def _through_identities(t: tf.Tensor) -> tf.Operation:
    """The one op that consumes `t` past identities; _Refused if there is not exactly one. The ops
    tf.gradients made (a reduction's gradient reading its input's shape) are not counted: the
    backward walk checks them."""
    while True:
        consumers = [c for c in t.consumers() if not made_by_tf_gradients(c)]
        if len(consumers) != 1:
            raise _Refused(OTHER_CONSUMER)
        if consumers[0].type not in _PASS_THROUGH:
            return consumers[0]
        t = consumers[0].outputs[0]


def _constant(t: tf.Tensor) -> Any:
    return tf.get_static_value(t)


def _flat_ids_of(stitch: tf.Operation) -> tf.Tensor | None:
    """The ids tensor a partitioned lookup flattened: the stitch's positions are partitioned by each
    id's shard, computed from `Reshape(ids, [-1])` (TF's div strategy: FloorDiv, Maximum, ...)."""
    positions = stitch.inputs[0].op
    if positions.type != "DynamicPartition":
        return None
    todo, seen = [positions.inputs[1].op], set[str]()
    while todo and len(seen) < _ID_WALK_LIMIT:
        op = todo.pop(0)
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type == "Reshape" and (shape := _constant(op.inputs[1])) is not None and shape.tolist() == [-1]:
            return op.inputs[0]
        todo.extend(t.op for t in op.inputs)
    return None


def _forward(gather: tf.Operation, on_ps: set[str]) -> tuple[list[tf.Operation], tf.Operation, tf.Tensor]:
    """The gathers of one lookup, its reduction and its ids; _Refused with why it cannot be pooled."""
    looked_up = gather.outputs[0]
    if in_control_flow(looked_up):
        raise _Refused(CONTROL_FLOW)
    if any(colocated_with_any(c, on_ps | {gather.inputs[0].op.name}) for c in looked_up.consumers()):
        raise _Refused(MAX_NORM)
    nxt = _through_identities(looked_up)
    if nxt.type == "ParallelDynamicStitch":
        n = len(nxt.inputs) // 2
        gathers = [t.op for t in nxt.inputs[n:]]
        ids = _flat_ids_of(nxt)
        if any(g.type != "ResourceGather" for g in gathers) or ids is None:
            raise _Refused(OTHER_CONSUMER)
        reshape = _through_identities(nxt.outputs[0])
        if reshape.type != "Reshape":
            raise _Refused(OTHER_CONSUMER)
        reduction = _through_identities(reshape.outputs[0])
    else:
        gathers, ids, reduction = [gather], gather.inputs[1], nxt
    if reduction.type == "GatherV2":
        # embedding_lookup_sparse with sp_weights expands its distinct rows again to weight each id
        after = [c for c in reduction.outputs[0].consumers() if not made_by_tf_gradients(c)]
        if any(c.type == "Mul" for c in after):
            raise _Refused(WEIGHTED)
    if reduction.type == "Mul":
        raise _Refused(WEIGHTED)
    if reduction.type in _SPARSE_KINDS:
        if reduction.inputs[1].op.type != "Unique" or reduction.inputs[1].value_index != 1 or len(gathers) != 1:
            raise _Refused(OTHER_CONSUMER)
        return gathers, reduction, ids
    if reduction.type not in _DENSE_KINDS:
        raise _Refused(OTHER_CONSUMER)
    if reduction.inputs[0].shape.rank != 3:
        raise _Refused(RANK)
    axes = _constant(reduction.inputs[1])
    if axes is None or sorted({int(a) % 3 for a in tf.nest.flatten(axes.tolist())}) != [1]:
        raise _Refused(OTHER_AXIS)
    return gathers, reduction, ids


def _dense_grad_source(rows_grad: tf.Tensor, kind: Kind) -> tuple[tf.Tensor, list[tf.Operation]]:
    """d_pooled and the ops of `_MeanGrad`/`_SumGrad` from it to `rows_grad` ([batch, bag, dim]):
    Reshape → Tile (→ RealDiv by the bag, for a mean); a BroadcastTo instead of the Tile when the
    rows' shape is not fully known when the graph is built (ids fed with an unknown batch)."""
    chain = []
    t = rows_grad
    if kind is Kind.MEAN:
        if t.op.type != "RealDiv":
            raise _Refused(GRADIENT_CHAIN)
        chain.append(t.op)
        t = t.op.inputs[0]
    if t.op.type not in ("Tile", "BroadcastTo") or t.op.inputs[0].op.type != "Reshape":
        raise _Refused(GRADIENT_CHAIN)
    chain += [t.op, t.op.inputs[0].op]
    return t.op.inputs[0].op.inputs[0], chain[::-1]


def _flattened_source(indices: tf.Tensor) -> tf.Tensor | None:
    """The ids `_GatherGrad` flattened into an IndexedSlices' indices (`Reshape(gather.inputs[1],
    [size])`), or None when the indices are not such a reshape (e.g. two lookups' concatenated)."""
    if indices.op.type != "Reshape" or not made_by_tf_gradients(indices.op):
        return None
    return indices.op.inputs[0]


def stitch_positions(gather: tf.Operation) -> tf.Tensor | None:
    """A partitioned lookup's positions of the ids `gather` reads: the stitch's index input paired
    with the gather's rows (TF's DynamicPartition of a Range of the flattened ids)."""
    for stitch in gather.outputs[0].consumers():
        if stitch.type == "ParallelDynamicStitch":
            n = len(stitch.inputs) // 2
            for k in range(n):
                if stitch.inputs[n + k] is gather.outputs[0]:
                    return stitch.inputs[k]
    return None


def _backward(gathers: list[tf.Operation], reduction: tf.Operation, kind: Kind,
              grads: list[tf.IndexedSlices]) -> PooledBackward:
    """Walk from each shard's IndexedSlices up to the reduction's gradient: `_GatherGrad`'s Reshape,
    then (partitioned) `_DynamicStitchGrads`' GatherV2 and the Reshape back to [batch, bag, dim], then
    the reduction's gradient. Every shard must reach the same d_pooled, and each IndexedSlices must
    be this lookup's gather's own (its indices that gather's ids, and, partitioned, its rows picked
    at that gather's stitch positions): a table read by a second lookup (an eval one outside the
    loss) hands apply_gradients the trained lookup's gradient, which this lookup must not take."""
    sources: set[str] = set()
    d_pooled = None
    for gather, grad in zip(gathers, grads, strict=True):
        if reduced_on_the_way(grad):
            raise _Refused(REDUCED_ON_THE_WAY)
        values = grad.values.op
        if values.type != "Reshape" or not made_by_tf_gradients(values):
            raise _Refused(GRADIENT_CHAIN)
        if _flattened_source(grad.indices) is not gather.inputs[1]:
            raise _Refused(GRADIENT_CHAIN)
        rows = values.inputs[0]
        shard_chain = [values]
        while rows.op.type in _PASS_THROUGH:
            shard_chain.append(rows.op)
            rows = rows.op.inputs[0]
        if rows.op.type == "GatherV2":  # a partitioned lookup: the stitch's gradient
            if len(gathers) == 1 or rows.op.inputs[1] is not stitch_positions(gather):
                raise _Refused(GRADIENT_CHAIN)
            shard_chain.append(rows.op)
            flat = rows.op.inputs[0]
            if flat.op.type != "Reshape":
                raise _Refused(GRADIENT_CHAIN)
            shard_chain.append(flat.op)
            rows = flat.op.inputs[0]
        elif len(gathers) != 1:
            raise _Refused(GRADIENT_CHAIN)
        if reduction.type in _SPARSE_KINDS:
            if rows.op.type != reduction.type + "Grad" or rows.op.inputs[1] is not reduction.inputs[1]:
                raise _Refused(GRADIENT_CHAIN)
            source, head = rows.op.inputs[0], [rows.op]
        else:
            source, head = _dense_grad_source(rows, kind)
        if not all(made_by_tf_gradients(op) for op in head + shard_chain):
            raise _Refused(GRADIENT_CHAIN)
        sources.add(source.name)
        d_pooled = source
    if len(sources) != 1 or d_pooled is None or d_pooled.shape.rank not in (2, 3):
        raise _Refused(GRADIENT_CHAIN)
    return PooledBackward(d_pooled)


def _handle(gather: tf.Operation) -> str:
    return gather.inputs[0].op.name


def _match(gathers: list[tf.Operation], reduction: tf.Operation, ids: tf.Tensor, on_ps: set[str],
           gradients: Mapping[str, Any]) -> PooledLookup:
    if any(g.inputs[0].op.type != "VarHandleOp" or _handle(g) not in on_ps for g in gathers):
        raise _Refused(NOT_ON_PS)
    if any(g.get_attr("dtype") not in _POOLED_DTYPES for g in gathers):
        raise _Refused(DTYPE)
    if reduction.type in _SPARSE_KINDS:
        kind, axis, segment_ids = _SPARSE_KINDS[reduction.type], None, reduction.inputs[2]
    else:
        kind, axis, segment_ids = _DENSE_KINDS[reduction.type], 1, None
    grads = [gradients.get(_handle(g)) for g in gathers]
    if any(g is not None and not isinstance(g, tf.IndexedSlices) for g in grads):
        raise _Refused(GRADIENT_CHAIN)
    trained = [g for g in grads if g is not None]
    if trained and len(trained) != len(grads):
        raise _Refused(GRADIENT_CHAIN)  # some shards trained, others not: not a plain lookup's gradient
    backward = _backward(gathers, reduction, kind, trained) if trained else None
    return PooledLookup(
        shards=tuple(ShardGather(_handle(g), g, grad) for g, grad in zip(gathers, grads, strict=True)),
        ids=ids, segment_ids=segment_ids, reduction=reduction, kind=kind, bag_axis=axis, backward=backward,
    )


def pooled_lookups(graph: tf.Graph, devices: Mapping[str, str], gradients: Mapping[str, Any]) -> Matches:
    """The lookups of `graph` that could be pooled on the PS, and those that cannot, with why.

    `devices` maps variable names to their devices, as `placement.variable_devices` gives them
    (a table is on a PS when its device is a `/job:ps` one, as `dedup_remote_lookups` decides);
    `gradients` maps variable names (a partitioned variable's shards by their own names) to what
    the script handed to apply_gradients for them. Every non-batched `ResourceGather` of a variable
    is looked at; one that leads to no bag reduction at all (e.g. a plain lookup fed to a dense
    layer) is refused with OTHER_CONSUMER, so the caller sees every lookup it leaves alone.
    """
    on_ps = {name for name, device in devices.items() if device.startswith("/job:ps")}
    pooled: list[PooledLookup] = []
    refused: list[RefusedLookup] = []
    seen: set[str] = set()
    for op in graph.get_operations():
        if op.type in CONTROL_FLOW_OPS and any(t.op.name in on_ps for t in op.inputs):
            # control flow v2 (tf.cond, tf.while_loop, tf.function) reads a PS table in its own function
            refused.append(RefusedLookup((op,), CONTROL_FLOW))
        if op.type != "ResourceGather" or op.name in seen:
            continue
        gathers = [op]
        try:
            if op.get_attr("batch_dims") != 0:
                raise _Refused("a batched gather")
            gathers, reduction, ids = _forward(op, on_ps)
            pooled.append(_match(gathers, reduction, ids, on_ps, gradients))
        except _Refused as why:
            refused.append(RefusedLookup(tuple(gathers), str(why)))
        seen.update(g.name for g in gathers)
    return Matches(tuple(pooled), tuple(refused))
