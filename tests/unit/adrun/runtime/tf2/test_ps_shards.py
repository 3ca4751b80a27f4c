"""ps_shards.py in one process: a Keras 3 model whose Embedding and Dense kernel are split in two
shards (SplitVariable, as ps_variables.py makes them on PS tasks) trains exactly as the plain model,
its Adam slots split as their variables, and saves whole."""

from __future__ import annotations

import contextlib
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow.core import Variable
from keras.src.backend.tensorflow.optimizer import TFOptimizer
from tensorflow.python.eager import backprop

from adrun.runtime.tf2.ps_gather import row_reads
from adrun.runtime.tf2.ps_shards import (SplitVariable, gradients_of_whole_variables, joined, shards_of,
                                         slot_reference, slots_made_like_their_variable, split_gradient)

SPLIT = {"embeddings", "kernel"}


def split_in_two(next_creator: Any, **kwargs: Any) -> Any:
    """The named variables and their slots as 2 row shards (the first one row longer when odd)."""
    initial = kwargs["initial_value"]
    value = tf.convert_to_tensor(initial() if callable(initial) else initial, dtype=kwargs.get("dtype"))
    if kwargs.get("name") not in SPLIT and not isinstance(slot_reference(), SplitVariable):
        return next_creator(**{**kwargs, "initial_value": value})
    cut = (int(value.shape[0]) + 1) // 2
    return SplitVariable([next_creator(**{**kwargs, "initial_value": part, "name": f"{kwargs['name']}/part_{i}"})
                          for i, part in enumerate((value[:cut], value[cut:]))], name=kwargs["name"])


def trained(split: bool) -> tuple[list[np.ndarray], keras.Model]:
    keras.utils.set_random_seed(3)
    with tf.variable_creator_scope(split_in_two) if split else contextlib.nullcontext():
        ids = keras.Input((3,), dtype="int32")
        x = keras.layers.Flatten()(keras.layers.Embedding(11, 4)(ids))
        model = keras.Model(ids, keras.layers.Dense(2)(x))
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
        data = np.random.RandomState(0)
        model.fit(data.randint(-11, 11, (32, 3)), data.randn(32, 2), batch_size=8, epochs=2, verbose=0)
    return model.get_weights(), model


def test_split_model_trains_exactly_as_the_plain_one(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, _ = trained(split=False)
    for owner, name in ((backprop.GradientTape, "gradient"), (TFOptimizer, "add_variable_from_reference")):
        monkeypatch.setattr(owner, name, getattr(owner, name))  # undone after the test
    monkeypatch.setattr(Variable, "sparse_read", None, raising=False)
    gradients_of_whole_variables()
    slots_made_like_their_variable()
    row_reads()
    weights, model = trained(split=True)
    assert [len(shards_of(w)) for w in model.weights] == [2, 2, 1]  # embeddings, kernel, bias
    slots = [v for v in model.optimizer.variables if "embeddings" in v.path or "kernel" in v.path]
    assert len(slots) == 4 and all(len(shards_of(s)) == 2 for s in slots)
    assert [w.shape for w in weights] == [w.shape for w in plain]
    for got, expected in zip(weights, plain, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_gradient_split_per_shard_joins_back_exactly() -> None:
    """What a synchronous step pushes of a split variable (ps_apply.gradient_parts): dense row
    slices; rows by shard, ids shard-local, each shard's rows in their order; `joined` undoes it."""
    dense = tf.reshape(tf.range(10 * 3, dtype=tf.float32), [10, 3])
    parts = split_gradient(dense, [4, 3, 3])
    assert [p.shape[0] for p in parts] == [4, 3, 3]
    assert np.array_equal(joined([10, 3], [4, 3, 3], parts).numpy(), dense.numpy())
    rows = tf.IndexedSlices(tf.constant([[1.0], [2.0], [3.0], [4.0], [5.0]]), tf.constant([7, 1, 4, 1, 9]),
                            tf.constant([10, 1], tf.int64))
    parts = split_gradient(rows, [4, 3, 3])
    assert [p.indices.numpy().tolist() for p in parts] == [[1, 1], [0], [0, 2]]  # 7 -> shard 2, row 0
    assert [p.values.numpy().ravel().tolist() for p in parts] == [[2.0, 4.0], [3.0], [1.0, 5.0]]
    whole = joined([10, 1], [4, 3, 3], parts)
    assert whole.indices.numpy().tolist() == [1, 1, 4, 7, 9]
    assert np.array_equal(tf.convert_to_tensor(whole).numpy(), tf.convert_to_tensor(rows).numpy())
