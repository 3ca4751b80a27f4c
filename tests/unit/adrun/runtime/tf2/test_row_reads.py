"""row_reads.local_row_reads: a Keras 3 Embedding's lookup of a worker's own variable is one
ResourceGather, never a read of the whole table, with the same output and the same IndexedSlices
gradient (hence the same SGD step) as Keras's own read-then-gather."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow.core import Variable

from adrun.runtime.tf2.row_reads import local_row_reads

IDS = [3, -1, 3, 0, 7]  # a repeated row and a negative id (Keras's take counts it from the end)


def _fit_step(table: np.ndarray) -> tuple[keras.Model, tf.types.experimental.ConcreteFunction]:
    """An Embedding model whose SGD step was run once (a sparse update: the table is then copied on
    every whole read) and the concrete function of one more step."""
    model = keras.Sequential([keras.Input((len(IDS),), dtype="int32"), keras.layers.Embedding(*table.shape),
                              keras.layers.Flatten(), keras.layers.Dense(1, kernel_initializer="ones")])
    model.layers[0].embeddings.assign(table)
    optimizer = keras.optimizers.SGD(0.5)
    ids = tf.constant([IDS])

    @tf.function
    def step(ids: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(ids) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    step(ids)
    return model, step.get_concrete_function(ids)


def _whole_reads_of(variable: tf.Variable, graph: tf.Graph) -> int:
    """ReadVariableOps of `variable`'s handle in `graph` whose value is used."""
    handles = {t.name for t in graph.inputs if t.dtype == tf.resource}
    captured = {graph.captures[i][1].name for i in range(len(graph.captures))
                if graph.captures[i][0] is variable.handle} & handles
    return sum(1 for op in graph.get_operations() if op.type == "ReadVariableOp"
               and op.inputs[0].name in captured and any(o.consumers() for o in op.outputs))


def test_a_fit_step_gathers_rows_and_takes_the_same_step(monkeypatch: pytest.MonkeyPatch) -> None:
    table = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    keras_model, keras_step = _fit_step(table)
    embedding = keras_model.layers[0].embeddings.value
    assert _whole_reads_of(embedding, keras_step.graph) == 1  # Keras's own: the whole table read each step

    monkeypatch.setattr(Variable, "sparse_read", None, raising=False)  # undone after the test
    local_row_reads()
    model, step = _fit_step(table)
    ops = {op.type for op in step.graph.get_operations()}
    assert _whole_reads_of(model.layers[0].embeddings.value, step.graph) == 0
    assert "ResourceGather" in ops and "GatherV2" not in ops
    np.testing.assert_array_equal(model.layers[0].embeddings.numpy(), keras_model.layers[0].embeddings.numpy())
    assert not np.array_equal(model.layers[0].embeddings.numpy(), table)  # the step did move the rows


def test_lookup_and_gradient_are_keras_own_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = keras.layers.Embedding(8, 4, embeddings_initializer="uniform")
    layer.build((None,))

    def lookup() -> tuple[np.ndarray, tf.IndexedSlices]:
        with tf.GradientTape() as tape:
            out = layer(tf.constant(IDS))
            loss = tf.reduce_sum(out * tf.range(1.0, 5.0))
        return out.numpy(), tape.gradient(loss, layer.trainable_weights)[0]

    keras_out, keras_grad = lookup()
    monkeypatch.setattr(Variable, "sparse_read", None, raising=False)
    local_row_reads()
    out, grad = lookup()
    np.testing.assert_array_equal(out, keras_out)
    assert isinstance(grad, tf.IndexedSlices) and isinstance(keras_grad, tf.IndexedSlices)
    np.testing.assert_array_equal(grad.indices.numpy(), keras_grad.indices.numpy())
    np.testing.assert_array_equal(grad.values.numpy(), keras_grad.values.numpy())


def test_a_tensor_value_is_gathered_as_tf_gather_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a stateless scope Keras's `value` is the scope's tensor: it is gathered, not read again."""
    from keras.src.backend.common.stateless_scope import StatelessScope

    layer = keras.layers.Embedding(8, 4)
    layer.build((None,))
    replacement = tf.reshape(tf.range(32.0), (8, 4))
    monkeypatch.setattr(Variable, "sparse_read", None, raising=False)
    local_row_reads()
    with StatelessScope(state_mapping=[(layer.embeddings, replacement)]):
        out = layer(tf.constant([1, 5]))
    np.testing.assert_array_equal(out.numpy(), tf.gather(replacement, [1, 5]).numpy())
