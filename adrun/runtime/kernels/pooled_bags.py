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

import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from adrun.runtime.grads import records_for, variable_name
from adrun.runtime.kernels.distinct_rows import DistinctIds, fresh_scope, distinct_ids
from adrun.runtime.kernels.pooled_lookups import (
    NOT_ON_PS, Kind, PooledLookup, RefusedLookup, pooled_lookups, stitch_positions,
)

SHARED_GRADIENT = "another lookup reads the very same ids, so whose the table's gradient is is not known"


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
    refused: dict[str, str] = field(default_factory=dict)  # a refused lookup's first op name -> why, for the user
    reported: bool = False  # the refusals were written (once per graph, at set-up)


_state: weakref.WeakKeyDictionary[tf.Graph, _GraphState] = weakref.WeakKeyDictionary()


def _of(graph: tf.Graph) -> _GraphState:
    if graph not in _state:
        _state[graph] = _GraphState()
    return _state[graph]


def pooled_variables(graph: tf.Graph) -> frozenset[str]:
    """The variables and shards (by op name) whose lookups were decided pooled so far."""
    return frozenset(_of(graph).variables)


def bag_index(lookup: PooledLookup, worker: str) -> BagIndex:
    """The per-shard bag index of `lookup`, built once per graph on the worker (`worker`, unless the
    ids are placed elsewhere)."""
    state = _of(lookup.reduction.graph)
    key = lookup.reduction.name
    if key in state.indices:
        return state.indices[key]
    dtype = lookup.reduction.outputs[0].dtype
    shards = []
    with fresh_scope(lookup.reduction.graph, "adrun_pooled_bags"), tf.device(worker):
        if lookup.bag_axis is None:  # embedding_lookup_sparse: one gather of Unique's ids, bags are segments
            (shard,) = lookup.shards
            example = tf.cast(lookup.segment_ids, tf.int32)
            # SparseSegment* ops return (last segment id + 1) rows and refuse segment ids that decrease
            # (InvalidArgumentError, an unordered SparseTensor's): so does the pooled lookup, as its
            # batch, which every partial reads, waits for the same check
            ordered = tf.debugging.Assert(tf.reduce_all(example[1:] >= example[:-1]),
                                          ["segment ids are not increasing in", lookup.reduction.name])
            with tf.control_dependencies([ordered]):
                batch = tf.maximum(tf.reduce_max(example), -1) + 1
            distinct = _sorted(shard.gather.inputs[1], worker)
            shards.append(ShardBags(shard.variable, distinct.ids, tf.gather(distinct.positions, lookup.reduction.inputs[1]),
                                    example))
            counts = tf.cast(tf.math.unsorted_segment_sum(tf.ones_like(example), example, batch), dtype)[:, None]
            divisor = {Kind.MEAN: tf.maximum(counts, 1), Kind.SQRTN: tf.sqrt(tf.maximum(counts, 1)), Kind.SUM: None}[lookup.kind]
        else:
            shape = tf.shape(lookup.ids)
            batch, bag = shape[0], shape[1]
            for shard in lookup.shards:
                if len(lookup.shards) == 1:
                    positions = tf.range(tf.size(lookup.ids))
                else:
                    stitched = stitch_positions(shard.gather)
                    assert stitched is not None, "the matcher found this shard's gather in the stitch"
                    positions = tf.cast(stitched, tf.int32)
                distinct = _sorted(shard.gather.inputs[1], worker)
                shards.append(ShardBags(shard.variable, distinct.ids, distinct.positions, positions // bag))
            divisor = tf.cast(bag, dtype) if lookup.kind is Kind.MEAN else None
    state.indices[key] = BagIndex(tuple(shards), batch, divisor)
    return state.indices[key]


def _sorted(ids: tf.Tensor, worker: str) -> DistinctIds:
    """The sorted distinct ids of `ids` from the graph's memo: the rows path's gradient of the same
    ids (a lookup left to it) would read the very same tensor."""
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
        with fresh_scope(graph, "adrun_pooled_lookup"), tf.compat.v1.colocate_with(handle.op, ignore_existing=True):
            rows = tf.raw_ops.ResourceGather(resource=handle, indices=bags.ids, dtype=shard.gather.get_attr("dtype"),
                                             validate_indices=shard.gather.get_attr("validate_indices"))
            partials.append(tf.math.unsorted_segment_sum(tf.gather(rows, bags.index), bags.example, index.batch))
    reduced = lookup.reduction.outputs[0]
    with fresh_scope(graph, "adrun_pooled_lookup"), tf.device(worker):
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
    with fresh_scope(graph, "adrun_pooled_grad"), tf.device(worker):
        d_sum = tf.squeeze(d_pooled, axis=1) if d_pooled.shape.rank == 3 else d_pooled
        if index.divisor is not None:
            d_sum = d_sum / index.divisor
    grads = {}
    for shard, bags in zip(lookup.shards, index.shards, strict=True):
        assert shard.gradient is not None
        handle = shard.gather.inputs[0]
        with fresh_scope(graph, "adrun_pooled_grad"), tf.compat.v1.colocate_with(handle.op, ignore_existing=True):
            values = tf.math.unsorted_segment_sum(tf.gather(d_sum, bags.example), bags.index, tf.size(bags.ids))
        grads[shard.variable] = tf.IndexedSlices(values, bags.ids, shard.gradient.dense_shape)
    return grads


def _note_refusals(graph: tf.Graph, refused: Iterable[RefusedLookup], devices: Mapping[str, str],
                   poolable: Callable[[str], bool]) -> None:
    """Keep, for `report_refusals`, why each lookup of a PS table that could pool (`poolable`) keeps
    the rows path; a table off the PS or not to be pooled (`pool_bags: false`) is not the user's news."""
    state = _of(graph)
    on_ps = {name for name, device in devices.items() if device.startswith("/job:ps")}
    for lookup in refused:
        tables = sorted({t.op.name for op in lookup.ops for t in op.inputs if t.op.name in on_ps})
        if lookup.reason != NOT_ON_PS and any(poolable(t) for t in tables):
            state.refused.setdefault(lookup.ops[0].name, f"the lookup {lookup.ops[0].name} of {', '.join(tables)} "
                                                          f"is not pooled on the PS and moves rows: {lookup.reason}")


def report_refusals(graph: tf.Graph) -> None:
    """Write to stderr, once per graph, why each lookup noted at apply_gradients and set-up is not pooled."""
    state = _of(graph)
    if not state.reported:
        state.reported = True
        for line in sorted(state.refused.values()):
            sys.stderr.write(f"adrun: {line}\n")
        sys.stderr.flush()


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
    matches = pooled_lookups(graph, devices, gradients)
    trained = [lookup for lookup in matches.pooled if lookup.backward is not None]
    claims = Counter(s.variable for lookup in trained for s in lookup.shards)
    shared = [RefusedLookup(tuple(s.gather for s in lookup.shards), SHARED_GRADIENT) for lookup in trained
              if any(claims[s.variable] > 1 for s in lookup.shards)]
    _note_refusals(graph, matches.refused + tuple(shared), devices, poolable)
    for lookup in trained:
        # two lookups whose gathers both match one gradient (the very same ids tensor): whose it is
        # is not known, so neither replaces it
        pooled = all(poolable(s.variable) and claims[s.variable] == 1 for s in lookup.shards)
        if _decide(graph, lookup, pooled) and pooled:
            result.update(pooled_gradients(lookup, bag_index(lookup, worker), worker))
    return result


def pool_lookups(graph: tf.Graph, devices: Mapping[str, str], poolable: Callable[[str], bool], worker: str) -> set[str]:
    """At session set-up: build the pooled forward of every lookup decided pooled, deciding the ones
    no apply_gradients call trains (`poolable(shard name)` for each shard). Returns the names of
    the gathers the pooled lookups replaced, which the other set-up rewrites leave alone. Writes
    why each lookup that could have pooled did not (noted here and at apply_gradients) to stderr."""
    trained = {variable_name(v) for call in records_for(graph).calls for g, v in call.grads_and_vars if g is not None}
    replaced: set[str] = set()
    matches = pooled_lookups(graph, devices, {})
    _note_refusals(graph, matches.refused, devices, poolable)
    report_refusals(graph)
    for lookup in matches.pooled:
        shards = [s.variable for s in lookup.shards]
        # a trained lookup no call pooled (its gradient refused by the matcher there) keeps today's path
        if _decide(graph, lookup, not any(s in trained for s in shards) and all(poolable(s) for s in shards)):
            pool_forward(lookup, bag_index(lookup, worker), worker)
            replaced.update(s.gather.name for s in lookup.shards)
    return replaced
