"""Pooling a lookup's bags on the PS tasks: each shard returns per-example sums and forms its own
gradient rows (docs/performance.md, "Pooling bags on the PS").

For a lookup `reduce_mean(gather(table, ids[B, L]), axis=1)` of a PS-held table that
`pooled_lookups` matched, shard s of the table receives from the worker its distinct local ids u_s
(sorted int64, as the sparse accumulator wants them), and per occurrence of one of its ids the
index into u_s and the example the occurrence belongs to (`bag_index`). Then:
- forward (`pool_forward`, at session set-up): on PS s `rows = gather(table_s, u_s)` and
  `partial_s = unsorted_segment_sum(rows[index_s], example_s, B)`; on the worker the sum of the
  partials, divided per example as the reduction divides (by L, by the bag's count, by its square
  root, or not at all), replaces the reduction's output. [B, dim] leaves each PS instead of the
  bag's rows.
- backward (`pooled_gradients`, at apply_gradients): the worker sends d_sum = d_pooled divided the
  same way; on PS s `unsorted_segment_sum(d_sum[example_s], index_s, |u_s|)` is exactly the rows
  `distinct_rows.merged_rows` makes on the worker today, as IndexedSlices on u_s, which go into the
  same accumulator or optimizer update. [B, dim] leaves the worker instead of one row per distinct id.
The sums are the same sums in another order (per shard, then across shards).

The index is memoized per graph, by the reduction's name: the forward and the backward use the
very same tensors, which TF sends once per step to each PS task that reads them. Whether a lookup
is pooled is decided once (`decided`): at apply_gradients for a trained one (`pool_gradients`), at
set-up for one no call trains (`pool_lookups`); the forward follows that decision.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from adrun.runtime.grads import records_for, variable_name
from adrun.runtime.kernels.distinct_rows import _fresh_scope, distinct_ids
from adrun.runtime.kernels.pooled_lookups import Kind, PooledLookup, pooled_lookups


@dataclass(frozen=True)
class ShardBags:
    variable: str  # the shard's (or whole variable's) name
    ids: tf.Tensor  # u_s: the shard's distinct local ids this step, sorted, int64
    index: tf.Tensor  # per occurrence of one of them, its index into `ids` (int32)
    example: tf.Tensor  # per occurrence, its example: the output row its bag reduces into (int32)


@dataclass(frozen=True)
class BagIndex:
    shards: tuple[ShardBags, ...]
    batch: tf.Tensor  # B, the reduction's output rows, read at run time (int32 scalar)
    divisor: tf.Tensor | None  # broadcastable to [B, 1]: the bag (mean), count or √count per example; None for a sum


@dataclass
class _GraphState:
    indices: dict[str, BagIndex] = field(default_factory=dict)  # by reduction name
    decided: dict[str, bool] = field(default_factory=dict)  # reduction name -> pooled or not
    variables: set[str] = field(default_factory=set)  # shards of the lookups decided pooled


_state: weakref.WeakKeyDictionary[tf.Graph, _GraphState] = weakref.WeakKeyDictionary()


def _of(graph: tf.Graph) -> _GraphState:
    if graph not in _state:
        _state[graph] = _GraphState()
    return _state[graph]


def pooled_variables(graph: tf.Graph) -> frozenset[str]:
    """The variables and shards (by op name) whose lookups were decided pooled so far."""
    return frozenset(_of(graph).variables)


def _stitch_positions(gather: tf.Operation) -> tf.Tensor:
    """A partitioned lookup's positions of the ids this shard's gather reads: the stitch's index
    input paired with the gather's rows (TF's DynamicPartition of a Range of the flattened ids)."""
    (stitch,) = [c for c in gather.outputs[0].consumers() if c.type == "ParallelDynamicStitch"]
    n = len(stitch.inputs) // 2
    (k,) = [i for i in range(n) if stitch.inputs[n + i] is gather.outputs[0]]
    return stitch.inputs[k]


def bag_index(lookup: PooledLookup, worker: str) -> BagIndex:
    """The per-shard bag index of `lookup`, built once per graph on the worker (`worker`, unless the
    ids are placed elsewhere)."""
    state = _of(lookup.reduction.graph)
    key = lookup.reduction.name
    if key in state.indices:
        return state.indices[key]
    dtype = lookup.reduction.outputs[0].dtype
    shards = []
    with _fresh_scope(lookup.reduction.graph, "adrun_pooled_bags"), tf.device(worker):
        if lookup.bag_axis is None:  # embedding_lookup_sparse: one gather of Unique's ids, bags are segments
            (shard,) = lookup.shards
            example = tf.cast(lookup.segment_ids, tf.int32)
            # SparseSegment* ops return (last segment id + 1) rows; segment ids are sorted
            batch = tf.maximum(tf.reduce_max(example), -1) + 1
            distinct = _sorted(shard.gather.inputs[1], worker)
            shards.append(ShardBags(shard.variable, distinct.ids, tf.gather(distinct.positions, lookup.reduction.inputs[1]),
                                    example))
            counts = tf.math.unsorted_segment_sum(tf.ones_like(example, dtype), example, batch)[:, None]
            divisor = {Kind.MEAN: tf.maximum(counts, 1), Kind.SQRTN: tf.sqrt(tf.maximum(counts, 1)), Kind.SUM: None}[lookup.kind]
        else:
            shape = tf.shape(lookup.ids)
            batch, bag = shape[0], shape[1]
            for shard in lookup.shards:
                if len(lookup.shards) == 1:
                    positions = tf.range(tf.size(lookup.ids))
                else:
                    positions = tf.cast(_stitch_positions(shard.gather), tf.int32)
                distinct = _sorted(shard.gather.inputs[1], worker)
                shards.append(ShardBags(shard.variable, distinct.ids, distinct.positions, positions // bag))
            divisor = tf.cast(bag, dtype) if lookup.kind is Kind.MEAN else None
    state.indices[key] = BagIndex(tuple(shards), batch, divisor)
    return state.indices[key]


def _sorted(ids: tf.Tensor, worker: str) -> Any:
    distinct = distinct_ids(ids, worker)
    if distinct is None:  # the matcher refuses lookups in control flow
        raise ValueError(f"ids {ids.name} are made inside a control-flow construct")
    return distinct


def pool_forward(lookup: PooledLookup, index: BagIndex, worker: str) -> tf.Tensor:
    """Build the pooled forward of `lookup` and make the reduction's consumers read it; returns it."""
    graph = lookup.reduction.graph
    partials = []
    for shard, bags in zip(lookup.shards, index.shards, strict=True):
        handle = shard.gather.inputs[0]
        with _fresh_scope(graph, "adrun_pooled_lookup"), tf.compat.v1.colocate_with(handle.op, ignore_existing=True):
            rows = tf.raw_ops.ResourceGather(resource=handle, indices=bags.ids, dtype=shard.gather.get_attr("dtype"),
                                             validate_indices=shard.gather.get_attr("validate_indices"))
            partials.append(tf.math.unsorted_segment_sum(tf.gather(rows, bags.index), bags.example, index.batch))
    reduced = lookup.reduction.outputs[0]
    with _fresh_scope(graph, "adrun_pooled_lookup"), tf.device(worker):
        pooled = tf.add_n(partials) if len(partials) > 1 else tf.identity(partials[0])
        if index.divisor is not None:
            pooled = pooled / index.divisor
        if reduced.shape.rank == 3:  # keep_dims
            pooled = tf.expand_dims(pooled, 1)
        pooled.set_shape(reduced.shape)
    for consumer in reduced.consumers():
        for i, t in enumerate(consumer.inputs):
            if t is reduced:
                consumer._update_input(i, pooled)
    return pooled


def pooled_gradients(lookup: PooledLookup, index: BagIndex, worker: str) -> dict[str, tf.IndexedSlices]:
    """Each shard's gradient of `lookup`, one row per distinct id, formed on its PS task from d_sum."""
    assert lookup.backward is not None
    graph = lookup.reduction.graph
    d_pooled = lookup.backward.d_pooled
    with _fresh_scope(graph, "adrun_pooled_grad"), tf.device(worker):
        d_sum = tf.squeeze(d_pooled, axis=1) if d_pooled.shape.rank == 3 else d_pooled
        if index.divisor is not None:
            d_sum = d_sum / index.divisor
    grads = {}
    for shard, bags in zip(lookup.shards, index.shards, strict=True):
        assert shard.gradient is not None
        handle = shard.gather.inputs[0]
        with _fresh_scope(graph, "adrun_pooled_grad"), tf.compat.v1.colocate_with(handle.op, ignore_existing=True):
            values = tf.math.unsorted_segment_sum(tf.gather(d_sum, bags.example), bags.index, tf.size(bags.ids))
        grads[shard.variable] = tf.IndexedSlices(values, bags.ids, shard.gradient.dense_shape)
    return grads


def _decide(graph: tf.Graph, lookup: PooledLookup, pooled: bool) -> bool:
    """Record the decision for `lookup` unless one was made already; returns the one that holds."""
    state = _of(graph)
    if lookup.reduction.name not in state.decided:
        state.decided[lookup.reduction.name] = pooled
        if pooled:
            state.variables.update(s.variable for s in lookup.shards)
    return state.decided[lookup.reduction.name]


def pool_gradients(graph: tf.Graph, grads_and_vars: Iterable[tuple[Any, Any]], devices: Mapping[str, str],
                   poolable: Callable[[str], bool], worker: str) -> dict[str, tf.IndexedSlices]:
    """At apply_gradients: the gradients, by variable or shard name, of the lookups this call trains
    that are pooled, formed on their PS tasks. A lookup is pooled when every shard's gradient goes
    to a PS in a way that takes IndexedSlices there (`poolable(shard name)`); the decision is
    recorded for the forward built at set-up."""
    gradients = {variable_name(v): g for g, v in grads_and_vars if g is not None}
    result: dict[str, tf.IndexedSlices] = {}
    for lookup in pooled_lookups(graph, devices, gradients).pooled:
        if lookup.backward is None:  # not trained by this call
            continue
        pooled = all(poolable(s.variable) for s in lookup.shards)
        if _decide(graph, lookup, pooled) and pooled:
            result.update(pooled_gradients(lookup, bag_index(lookup, worker), worker))
    return result


def pool_lookups(graph: tf.Graph, devices: Mapping[str, str], poolable: Callable[[str], bool], worker: str) -> set[str]:
    """At session set-up: build the pooled forward of every lookup decided pooled, deciding the ones
    no apply_gradients call trains (`poolable(shard name)` for each shard). Returns the names of
    the gathers the pooled lookups replaced, which the other set-up rewrites leave alone."""
    trained = {variable_name(v) for call in records_for(graph).calls for g, v in call.grads_and_vars if g is not None}
    replaced: set[str] = set()
    for lookup in pooled_lookups(graph, devices, {}).pooled:
        shards = [s.variable for s in lookup.shards]
        # a trained lookup no call pooled (its gradient refused by the matcher there) keeps today's path
        if _decide(graph, lookup, not any(s in trained for s in shards) and all(poolable(s) for s in shards)):
            pool_forward(lookup, bag_index(lookup, worker), worker)
            replaced.update(s.gather.name for s in lookup.shards)
    return replaced
