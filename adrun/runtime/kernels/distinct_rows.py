"""Each row of a table crosses the network once per step and worker, however often a batch names it.

A batch's lookups name far fewer distinct rows than ids (Zipf-distributed ids repeat a lot). So
for a variable held by a PS:
- a lookup `ResourceGather(table, ids)` becomes a gather of the batch's distinct ids on the PS,
  expanded back to one row per id on the worker (`dedup_remote_lookups`, at session set-up);
- a sparse gradient's rows with equal ids are summed on the worker before they are pushed to a PS
  or all-gathered (`merged_rows`, where gradients are synchronized).
Both take the distinct ids of an ids tensor from one memo per graph (`distinct_ids`), so a lookup
and the gradient of that lookup use the very same ids tensor. TF sends a tensor once to each device
that consumes it: the ids cross to the PS once and serve both the pull and the push. A gradient's
distinct ids are sorted, as the sparse accumulator expects them; a lookup whose gradient is not
merged (one worker applies its gradient as the plain run does; a table read but not trained)
gathers them in the order `tf.unique` finds them: a gather's rows do not depend on the order of its
ids, and the sort (an argsort, its inverse permutation and two gathers per table and step) would
serve nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import tensorflow as tf


@dataclass(frozen=True)
class DistinctIds:
    ids: tf.Tensor  # the distinct ids of an ids tensor, int64; sorted or not as the memo's key says
    positions: tf.Tensor  # for each element of the flattened ids tensor, the index of its id in `ids`


# per graph: ids tensor name -> its distinct ids, sorted and (once a lookup needed them first) unsorted
_memo: weakref.WeakKeyDictionary[tf.Graph, dict[tuple[str, bool], DistinctIds]] = weakref.WeakKeyDictionary()


@contextmanager
def _fresh_scope(graph: tf.Graph, name: str) -> Iterator[None]:
    """Build in `graph` outside whatever the caller is inside: no control dependencies or
    colocation from the user's code, a name scope of adrun's."""
    with ExitStack() as stack:
        stack.enter_context(graph.as_default())
        stack.enter_context(tf.control_dependencies(None))
        stack.enter_context(tf.compat.v1.colocate_with(None, ignore_existing=True))
        stack.enter_context(tf.name_scope(name))
        yield


def _in_control_flow(t: tf.Tensor) -> bool:
    return t.op._get_control_flow_context() is not None


def distinct_ids(ids: tf.Tensor, device: str, ordered: bool = True) -> DistinctIds | None:
    """The distinct ids of `ids` (any shape), computed once per graph on `ids`'s device or else
    `device`: sorted, or with `ordered` false the sorted ones if the graph has them already and
    else unsorted. A gradient merged after `dedup_remote_lookups` took the unsorted ones gets a
    sorted `tf.unique` of its own, whose ids cross to the PS once more: a cost in speed only, the
    rows are the same. None for ids made inside a control-flow construct, which cannot be used
    outside it."""
    if _in_control_flow(ids):
        return None
    memo = _memo.setdefault(ids.graph, {})
    if not ordered and (ids.name, True) in memo:
        return memo[(ids.name, True)]  # one ids tensor for the lookup and the gradient: sent once
    key = (ids.name, ordered)
    if key not in memo:
        with _fresh_scope(ids.graph, "adrun_distinct_ids"), tf.device(ids.device or device):
            unique, positions = tf.unique(tf.reshape(tf.cast(ids, tf.int64), [-1]))
            if ordered:
                order = tf.argsort(unique)
                unique, positions = tf.gather(unique, order), tf.gather(tf.math.invert_permutation(order), positions)
            memo[key] = DistinctIds(unique, positions)
    return memo[key]


def _flattened_source(indices: tf.Tensor) -> tf.Tensor:
    """The tensor whose flattening `indices` is, when it is a reshape to a vector (as the gradient
    of a lookup is: its ids reshaped); else `indices` itself. Either lists the same ids in the same
    order, so a lookup and its gradient share one `distinct_ids`."""
    if indices.op.type == "Reshape" and indices.shape.rank == 1:
        return indices.op.inputs[0]
    return indices


def merged_rows(grad: tf.IndexedSlices, device: str) -> tf.IndexedSlices:
    """`grad` with one row per distinct index, rows of equal indices summed, indices sorted int64;
    computed on the gradient's device or else `device` (this worker), so only distinct rows leave it."""
    distinct = distinct_ids(_flattened_source(grad.indices), device) or distinct_ids(grad.indices, device)
    if distinct is None:
        raise ValueError(f"gradient indices {grad.indices.name} are made inside a control-flow construct")
    with _fresh_scope(grad.values.graph, "adrun_merged_rows"), tf.device(grad.values.device or device):
        values = tf.math.unsorted_segment_sum(grad.values, distinct.positions, tf.size(distinct.ids))
    return tf.IndexedSlices(values, distinct.ids, grad.dense_shape)


def _colocated_with_any(op: tf.Operation, names: set[str]) -> bool:
    return op.device.startswith("/job:ps") or any(
        g.decode().startswith("loc:@") and g.decode()[len("loc:@"):] in names for g in op.colocation_groups()
    )


def dedup_remote_lookups(graph: tf.Graph, devices: dict[str, str], local_device: str, leave: Collection[str] = ()) -> int:
    """Make every lookup of a PS variable pull only the batch's distinct rows; returns how many
    lookups were rewritten.

    Left as they are: the gathers named in `leave` (those a pooled lookup replaced, pooled_bags.py),
    lookups inside control flow, batched gathers, and lookups whose result is used
    on a PS (e.g. clipped there by `embedding_lookup(max_norm=...)`), which would send the
    expanded rows back to the PS.
    """
    on_ps = {name for name, device in devices.items() if device.startswith("/job:ps")}
    rewritten = 0
    for op in graph.get_operations():
        if op.type != "ResourceGather" or op.name in leave or op.get_attr("batch_dims") != 0:
            continue
        handle, ids = op.inputs[0], op.inputs[1]
        looked_up = op.outputs[0]
        consumers = looked_up.consumers()
        if (handle.op.type != "VarHandleOp" or handle.op.name not in on_ps or _in_control_flow(looked_up)
                or not consumers or any(_colocated_with_any(c, on_ps) for c in consumers)):
            continue
        distinct = distinct_ids(ids, local_device, ordered=False)
        if distinct is None:
            continue
        with _fresh_scope(graph, "adrun_distinct_lookup"):
            with tf.compat.v1.colocate_with(handle.op, ignore_existing=True):
                rows = tf.raw_ops.ResourceGather(
                    resource=handle, indices=distinct.ids, dtype=op.get_attr("dtype"),
                    validate_indices=op.get_attr("validate_indices"),
                )
            with tf.device(ids.device or local_device):
                expanded = tf.gather(rows, distinct.positions)
                shape = tf.concat([tf.shape(ids), tf.shape(expanded)[1:]], axis=0)
                same = tf.reshape(expanded, shape)
                same.set_shape(looked_up.shape)
        for consumer in consumers:
            for i, t in enumerate(consumer.inputs):
                if t is looked_up:
                    consumer._update_input(i, same)
        rewritten += 1
    return rewritten
