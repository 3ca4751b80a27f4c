"""Variables split over PS tasks in a TF2 parameter-server plan (PartitionedPS), as TensorFlow's
`ShardedVariable` inside a Keras 3 variable.

ps_variables.py makes a planned split variable as one `ShardedVariable` of shard variables, each on
its shard's PS task (rows as `shard_sizes`, which is TF's "div" sharding), and Keras 3's variable
wraps it as it wraps any `tf.Variable`. TF's `ShardedVariable` then serves what Keras asks of it:
a read is the concatenation of the shard reads, `assign_add`/`assign_sub` slice the update per
shard, and `scatter_*` (Keras's sparse updates) send each row to its shard (ids in "div" order).
What Keras 3.15 does with a variable that it does not serve is served here: saving reads the
variable whole (`SplitVariable`), and three things are patched:
- the gradient: Keras's trainer asks `tf.GradientTape.gradient` for the gradient of the Keras
  variable, which the tape finds by the variable's one `handle`; a sharded variable has none.
  `gradient` is asked for the shards instead and their gradients are joined into the whole
  variable's gradient (dense: concatenated; rows: shard-local ids moved by the shard's offset);
- an optimizer slot: Keras creates it under `colocate_vars_with(variable)`, which converts a
  sharded variable "as a reference" and fails; and a slot made while `fit` traces its first step
  bypasses any variable creator the script runs under (tf.function's own creator makes it). The
  slot is made under `tf.init_scope()` (eagerly, through adrun's creator), and the creator is told
  which variable it belongs to, so it is split, or placed, as its variable is;
- an Embedding lookup: ps_gather.py gathers each shard's distinct rows on its PS
  (`ShardedVariable.sparse_read` concatenates the shards' rows in shard order instead of the ids').
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute.sharded_variable import ShardedVariable
from tensorflow.python.eager import backprop
from tensorflow.python.util import nest

__all__ = ["ShardedVariable", "SplitVariable", "gradients_of_whole_variables", "joined", "shards_of",
           "slot_reference", "slots_made_like_their_variable", "split_gradient"]

_slots = threading.local()  # .reference: the tf.Variable whose slot is being made


class SplitVariable(ShardedVariable):
    """TF's ShardedVariable as Keras 3's saving uses a variable, whole: `np.asarray(variable)`
    (Keras's `Variable.__array__` calls the wrapped variable's `__array__`, which ShardedVariable
    lacks) and a checkpoint's one tensor under the plain model's name and full shape (Keras's
    `Variable._serialize_to_tensors` asks the wrapped variable; ShardedVariable has only TF1-style
    slice saveables, which `tf.train.Checkpoint` does not take from inside a Keras variable)."""

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.array(self.numpy(), dtype=dtype, copy=copy)

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        return {"VARIABLE_VALUE": tf.convert_to_tensor(self)}

    def _restore_from_tensors(self, restored_tensors: dict[str, tf.Tensor]) -> Any:
        return self.assign(restored_tensors["VARIABLE_VALUE"])


def shards_of(variable: Any) -> list[Any]:
    """The tf.Variables that hold `variable` (a Keras or TF variable): its shards, or itself."""
    value = _inner(variable)
    return list(value.variables) if isinstance(value, ShardedVariable) else [value]


def _inner(variable: Any) -> Any:
    from keras.src.backend.tensorflow.core import Variable

    return variable._value if isinstance(variable, Variable) else variable


def slot_reference() -> Any:
    """The variable (a tf.Variable or ShardedVariable) whose optimizer slot is being made, or None."""
    return getattr(_slots, "reference", None)


def slots_made_like_their_variable() -> None:
    """Patch Keras 3's TensorFlow optimizer: a slot is made eagerly, with its variable known."""
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    tf_made = TFOptimizer.add_variable_from_reference

    def add_variable_from_reference(self: Any, reference_variable: Any, name: Any = None,
                                    initializer: Any = "zeros") -> Any:
        reference = _inner(reference_variable)
        # colocation means nothing to a sharded variable: the creator places each shard
        make = BaseOptimizer.add_variable_from_reference if isinstance(reference, ShardedVariable) else tf_made
        _slots.reference = reference
        try:
            with tf.init_scope():
                return make(self, reference_variable, name=name, initializer=initializer)
        finally:
            _slots.reference = None

    TFOptimizer.add_variable_from_reference = add_variable_from_reference


def gradients_of_whole_variables() -> None:
    """Patch `tf.GradientTape.gradient`: a split variable's gradient is its shards' gradients joined."""
    tape_gradient = backprop.GradientTape.gradient

    def gradient(self: Any, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: Any = tf.UnconnectedGradients.NONE) -> Any:
        flat = nest.flatten(sources)
        parts = [shards_of(s) if isinstance(_inner(s), ShardedVariable) else [s] for s in flat]
        found = tape_gradient(self, target, [p for ps in parts for p in ps], output_gradients, unconnected_gradients)
        wholes, start = [], 0
        for source, ps in zip(flat, parts, strict=True):
            grads = found[start:start + len(ps)]
            start += len(ps)
            whole = grads[0] if len(ps) == 1 and ps[0] is source else joined(
                source.shape, [int(p.shape[0]) for p in ps], grads)
            wholes.append(whole)
        return nest.pack_sequence_as(sources, wholes)

    backprop.GradientTape.gradient = gradient


def joined(shape: Any, rows: list[int], grads: list[Any]) -> Any:
    """One gradient of a variable of `shape` from the gradients of its shards of `rows` rows each
    (None if none reached it): dense, concatenated (a missing shard's part is zeros); rows, each
    shard's ids moved by its offset, shard by shard, so each shard's rows keep their order."""
    if all(g is None for g in grads):
        return None
    shape = tf.TensorShape(shape)
    if all(isinstance(g, tf.IndexedSlices) or g is None for g in grads):
        offset, values, ids = 0, [], []
        for n, g in zip(rows, grads, strict=True):
            if g is not None:
                values.append(g.values)
                ids.append(tf.cast(g.indices, tf.int64) + offset)
            offset += n
        return tf.IndexedSlices(tf.concat(values, 0), tf.concat(ids, 0), tf.constant(shape.as_list(), tf.int64))
    dtype = next(g.dtype for g in grads if g is not None)
    return tf.concat([tf.zeros([n, *shape[1:]], dtype) if g is None else tf.convert_to_tensor(g)
                      for n, g in zip(rows, grads, strict=True)], 0)


def split_gradient(grad: Any, rows: list[int]) -> list[Any]:
    """`grad` of a whole variable cut into its shards' gradients (shards of `rows` rows each), the
    inverse of `joined`: dense, row slices; rows, each shard's rows in their order with shard-local
    ids."""
    if not isinstance(grad, tf.IndexedSlices):
        return tf.split(grad, rows, axis=0)
    ids = tf.cast(grad.indices, tf.int64)
    parts, start = [], 0
    for n in rows:
        mine = tf.logical_and(ids >= start, ids < start + n)
        local = tf.cast(tf.boolean_mask(ids, mine) - start, grad.indices.dtype)
        parts.append(tf.IndexedSlices(tf.boolean_mask(grad.values, mine), local,
                                      tf.constant([n, *grad.values.shape[1:]], tf.int64)))
        start += n
    return parts
