"""ps_gather.row_reads: a Keras 3 Embedding's lookup becomes one ResourceGather on its variable, with
the same output and the same IndexedSlices gradient as Keras's own read-then-gather."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow.core import Variable

from adrun.runtime.tf2.ps_gather import row_reads

IDS = [3, -1, 3, 0, 7]  # a repeated row and a negative id (Keras's take counts it from the end)


def _lookup_and_gradient(layer: keras.layers.Embedding) -> tuple[set[str], np.ndarray, tf.IndexedSlices]:
    @tf.function
    def step(ids: tf.Tensor) -> tuple[tf.Tensor, tf.IndexedSlices]:
        with tf.GradientTape() as tape:
            out = layer(ids)
            loss = tf.reduce_sum(out * tf.range(1.0, 5.0))
        return out, tape.gradient(loss, layer.trainable_weights)[0]

    ids = tf.constant(IDS)
    graph = step.get_concrete_function(ids).graph
    consumed = {op.type for op in graph.get_operations() if any(o.consumers() for o in op.outputs)}
    out, grad = step(ids)
    return consumed, out.numpy(), grad


def test_lookup_is_a_gather_on_the_variable_with_the_same_values_and_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = keras.layers.Embedding(8, 4, embeddings_initializer="uniform")
    layer.build((None,))
    keras_ops, keras_out, keras_grad = _lookup_and_gradient(layer)
    assert {"ReadVariableOp", "GatherV2"} <= keras_ops  # Keras's own: the whole table read, then gathered

    monkeypatch.setattr(Variable, "sparse_read", None, raising=False)  # undone after the test
    row_reads()
    ops, out, grad = _lookup_and_gradient(layer)
    assert "ResourceGather" in ops and not {"ReadVariableOp", "GatherV2"} & ops
    np.testing.assert_array_equal(out, keras_out)
    assert isinstance(grad, tf.IndexedSlices)
    np.testing.assert_array_equal(grad.indices.numpy(), keras_grad.indices.numpy())
    np.testing.assert_array_equal(grad.values.numpy(), keras_grad.values.numpy())
