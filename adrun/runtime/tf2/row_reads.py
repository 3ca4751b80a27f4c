"""Keras 3 embedding lookups of a worker's own variable as a row gather, not a read of the whole table.

Keras 3's `Embedding.call` is `ops.take(self.embeddings, ids, axis=0)`, which hands the Keras variable
to `tf.gather`; `tf.gather` serves a variable with a `sparse_read` method by that method (one
`ResourceGather`) and otherwise converts it to a tensor first (a `ReadVariableOp` of the whole table).
Keras 3's TensorFlow `Variable` has no `sparse_read`, and once a sparse update (the optimizer's
`ResourceScatterSub`) has touched a variable TensorFlow copies it on every read, so each step copied
the whole table to look up a batch's rows: measured on the NCF Keras workload under an all-reduce
plan, 5.5 ms a step for the 12 MiB user table of a ≈19 ms step, where the graph-mode twin's
`embedding_lookup` (a `ResourceGather`) took 0.02 ms. This gives the variable the wrapped
`tf.Variable`'s own `sparse_read`. The rows are the same values, and the gradient (TF's
`ResourceGather` gradient) is the same `IndexedSlices`, rows in the same order, as the gradient of
the gather of a read, so the all-reduce path and the oracles see the very same rows.

Variables on PS tasks get their own lookup (ps_gather.py), installed instead of this one. Inside a
stateless or autocast scope Keras's `value` is a tensor, not a variable: that is gathered as
`tf.gather` would have gathered it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

Lookup = Callable[[Any, Any, str | None], tf.Tensor]


def local_row_reads() -> None:
    """Give Keras 3's TensorFlow Variable a `sparse_read`, which `tf.gather(variable, ids)` uses."""
    install_sparse_read(lambda value, ids, name: value.sparse_read(ids, name=name),
                        (resource_variable_ops.BaseResourceVariable,))


def install_sparse_read(lookup: Lookup, kinds: tuple[type, ...]) -> None:
    """Keras 3's Variable gets a `sparse_read` that looks rows up by `lookup(value, ids, name)` when
    its value is one of `kinds`, and gathers a tensor value (stateless or autocast scope) as
    `tf.gather` would have. The one installer for local (this module) and PS lookups (ps_gather.py)."""
    from keras.src.backend.tensorflow.core import Variable

    def sparse_read(self: Any, indices: Any, name: str | None = None) -> tf.Tensor:
        value = self.value
        if isinstance(value, kinds):
            return lookup(value, indices, name)
        return tf.gather(value, indices, name=name)

    Variable.sparse_read = sparse_read
