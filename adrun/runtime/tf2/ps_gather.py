"""Keras 3 embedding lookups of a PS variable as a row gather on the PS, in a parameter-server plan.

Keras 3's `Embedding.call` is `ops.take(self.embeddings, ids, axis=0)`; the TensorFlow backend's
`take` hands the Keras variable itself to `tf.gather`, which serves a variable with a `sparse_read`
method by that method (one `ResourceGather` op on the variable's device) and otherwise converts it
to a tensor: a `ReadVariableOp` of the whole table on the PS, shipped to the worker, then gathered
there. Keras 3's TensorFlow `Variable` has no `sparse_read`, so every step read the whole table
(measured: PSLoadBalancing ran the sparse Keras workload at 38 examples/s). This gives it one: the
wrapped `tf.Variable`'s own `sparse_read`, so only the looked-up rows leave the PS. Its gradient
(TF's `ResourceGather` gradient) is the same `IndexedSlices`, rows in the same order, as the
gradient of the gather of a read, so the sparse path and the oracles see the very same rows.

A variable split over PS tasks (ps_shards.py) is looked up shard by shard, each on its PS. Inside a
stateless scope or an autocast scope Keras's `value` is a tensor, not a variable: that read
is gathered as `tf.gather` would have gathered it.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from adrun.runtime.tf2.ps_shards import ShardedVariable, lookup


def row_reads() -> None:
    """Give Keras 3's TensorFlow Variable a `sparse_read`, which `tf.gather(variable, ids)` uses."""
    from keras.src.backend.tensorflow.core import Variable

    def sparse_read(self: Any, indices: Any, name: str | None = None) -> tf.Tensor:
        value = self.value
        if isinstance(value, ShardedVariable):
            return lookup(value, indices)
        if isinstance(value, resource_variable_ops.BaseResourceVariable):
            return value.sparse_read(indices, name=name)
        return tf.gather(value, indices, name=name)

    Variable.sparse_read = sparse_read
