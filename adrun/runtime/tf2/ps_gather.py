"""Keras 3 embedding lookups of a PS variable as a gather of the batch's distinct rows on the PS, in a
parameter-server plan.

Keras 3's `Embedding.call` is `ops.take(self.embeddings, ids, axis=0)`; the TensorFlow backend's
`take` hands the Keras variable itself to `tf.gather`, which serves a variable with a `sparse_read`
method by that method and otherwise converts it to a tensor: a `ReadVariableOp` of the whole table
on the PS, shipped to the worker, then gathered there. Keras 3's TensorFlow `Variable` has no
`sparse_read`, so every step read the whole table (measured: PSLoadBalancing ran the sparse Keras
workload at 38 examples/s). This gives it one that reads each distinct row once: the batch's
distinct ids go to the PS, one `ResourceGather` per shard (a variable split over PS tasks,
ps_shards.py, is gathered shard by shard, each on its PS), and the worker expands the rows back to
one per id. A batch names the same rows many times (the sparse workload: 2,560 ids, ≈1,100
distinct), so this roughly halves the pulled bytes; the values are the same rows, exactly.

Its gradient is the one a gather of the whole read would have had: one row per looked-up id, in the
ids' order (per shard, in their order, shard-local ids), not the rows summed per distinct id that
the gather of the distinct rows would give. Whether the rows may be summed is the optimizer's to
decide (duplicate_rows.py: Keras 3's Adam squares each row), which ps_apply.py does before a push.

Inside a stateless scope or an autocast scope Keras's `value` is a tensor, not a variable: that read
is gathered as `tf.gather` would have gathered it.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops, resource_variable_ops

from adrun.runtime.tf2.ps_shards import ShardedVariable, shards_of, split_gradient
from adrun.runtime.tf2.row_reads import install_sparse_read


def row_reads() -> None:
    """Give Keras 3's TensorFlow Variable a `sparse_read` reading each distinct row once from its PS."""
    install_sparse_read(lambda value, ids, name: distinct_rows_lookup(shards_of(value), ids),
                        (ShardedVariable, resource_variable_ops.BaseResourceVariable))


def distinct_rows_lookup(shards: list[Any], ids: Any) -> tf.Tensor:
    """Rows `ids` (any shape) of the variable held by `shards` (itself, or its row shards in order),
    each distinct row read once from its PS; the gradient is row for row, as a gather's."""
    ids = tf.convert_to_tensor(ids)
    rows = [int(shard.shape[0]) for shard in shards]
    row_shape = shards[0].shape[1:]
    dtype = shards[0].dtype
    for shard in shards:  # what the variable's own gather does first: the tape watches it
        resource_variable_ops.variable_accessed(shard)

    @tf.custom_gradient
    def gathered(flat_ids: tf.Tensor, *handles: tf.Tensor) -> Any:
        distinct, inverse = tf.unique(flat_ids)
        found = tf.gather(_read(handles, rows, distinct, dtype), inverse)

        def grad(dy: Any) -> tuple[Any, ...]:
            whole = tf.IndexedSlices(tf.convert_to_tensor(dy), flat_ids,
                                     tf.constant([sum(rows), *row_shape.as_list()], tf.int64))
            return (None, *([whole] if len(rows) == 1 else split_gradient(whole, rows)))

        return found, grad

    found = gathered(tf.reshape(ids, [-1]), *[shard.handle for shard in shards])
    return tf.reshape(found, tf.concat([tf.shape(ids), row_shape.as_list()], 0))


def _read(handles: tuple[tf.Tensor, ...], rows: list[int], distinct: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """Rows `distinct` (whole-variable ids) in their order, each shard's read by one gather on it."""
    if len(handles) == 1:
        return gen_resource_variable_ops.resource_gather(handles[0], distinct, dtype=dtype)
    positions, parts, start = [], [], 0
    for handle, n in zip(handles, rows, strict=True):
        mine = tf.cast(tf.where(tf.logical_and(distinct >= start, distinct < start + n))[:, 0], tf.int32)
        positions.append(mine)
        parts.append(gen_resource_variable_ops.resource_gather(handle, tf.gather(distinct, mine) - start, dtype=dtype))
        start += n
    return tf.dynamic_stitch(positions, parts)
