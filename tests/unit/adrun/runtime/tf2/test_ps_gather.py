"""ps_gather.row_reads: a Keras 3 Embedding's lookup becomes a gather of the batch's distinct ids on
its variable (or on each shard of a split one), with the same output and the same row-for-row
IndexedSlices gradient as Keras's own read-then-gather."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow.core import Variable
from tensorflow.python.ops import gen_resource_variable_ops

from adrun.runtime.tf2.ps_gather import distinct_rows_lookup, row_reads
from adrun.runtime.tf2.ps_shards import split_gradient

IDS = [3, -1, 3, 0, 7]  # a repeated row and a negative id (Keras's take counts it from the end)
WEIGHTS = tf.range(1.0, 5.0)  # a loss that weighs each column differently


def _lookup_and_gradient(layer: keras.layers.Embedding) -> tuple[tf.Graph, np.ndarray, tf.IndexedSlices]:
    @tf.function
    def step(ids: tf.Tensor) -> tuple[tf.Tensor, tf.IndexedSlices]:
        with tf.GradientTape() as tape:
            out = layer(ids)
            loss = tf.reduce_sum(out * WEIGHTS)
        return out, tape.gradient(loss, layer.trainable_weights)[0]

    ids = tf.constant(IDS)
    graph = step.get_concrete_function(ids).graph
    out, grad = step(ids)
    return graph, out.numpy(), grad


def _consumed(graph: tf.Graph) -> set[str]:
    return {op.type for op in graph.get_operations() if any(o.consumers() for o in op.outputs)}


def test_lookup_gathers_distinct_ids_on_the_variable_with_the_same_values_and_gradient(
        monkeypatch: pytest.MonkeyPatch) -> None:
    layer = keras.layers.Embedding(8, 4, embeddings_initializer="uniform")
    layer.build((None,))
    keras_graph, keras_out, keras_grad = _lookup_and_gradient(layer)
    assert {"ReadVariableOp", "GatherV2"} <= _consumed(keras_graph)  # Keras's own: the whole table read, then gathered

    monkeypatch.setattr(Variable, "sparse_read", None, raising=False)  # undone after the test
    row_reads()
    graph, out, grad = _lookup_and_gradient(layer)
    assert "ReadVariableOp" not in _consumed(graph)
    [gather] = [op for op in graph.get_operations() if op.type == "ResourceGather"]
    assert gather.inputs[1].op.type == "Unique"  # the PS reads each distinct row once
    np.testing.assert_array_equal(out, keras_out)
    assert isinstance(grad, tf.IndexedSlices)  # one row per looked-up id, 3 twice: what the optimizer decides on
    np.testing.assert_array_equal(grad.indices.numpy(), keras_grad.indices.numpy())
    np.testing.assert_array_equal(grad.values.numpy(), keras_grad.values.numpy())


def test_each_shard_gathers_its_distinct_rows_and_gets_its_rows_of_the_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    table = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    shards = [tf.Variable(table[:6]), tf.Variable(table[6:])]  # 6 + 4 rows
    ids = tf.constant([[8, 1, 8], [1, 9, 1], [8, 5, 0]])
    read: list[list[int]] = []
    resource_gather = gen_resource_variable_ops.resource_gather

    def counted(resource: Any, indices: Any, **kwargs: Any) -> Any:
        read.append(indices.numpy().tolist())
        return resource_gather(resource, indices, **kwargs)

    monkeypatch.setattr(gen_resource_variable_ops, "resource_gather", counted)
    with tf.GradientTape() as tape:
        out = distinct_rows_lookup(shards, ids)
        loss = tf.reduce_sum(out * tf.range(1.0, 4.0))
    grads = tape.gradient(loss, shards)
    assert read == [[1, 5, 0], [2, 3]]  # shard-local distinct ids, in order of first appearance
    np.testing.assert_array_equal(out.numpy(), table[ids.numpy()])

    whole = tf.Variable(table)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(whole, ids) * tf.range(1.0, 4.0))
    expected = split_gradient(tape.gradient(loss, whole), [6, 4])
    for got, want in zip(grads, expected, strict=True):
        assert got.indices.numpy().tolist() == want.indices.numpy().tolist()  # every id, duplicates kept
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
