"""ps_shards.py in one process: a Keras 3 model whose Embedding and Dense kernel are split in two
shards (SplitVariable, as ps_variables.py makes them on PS tasks) trains exactly as the plain model,
its Adam slots split as their variables, and saves whole."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from adrun.runtime.tf2.ps_shards import joined, shards_of, split_gradient
from tests.support.split_variables import split_patches, trained


def test_split_model_trains_exactly_as_the_plain_one(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, _ = trained(False, lambda: keras.optimizers.Adam(0.05))
    split_patches(monkeypatch)
    weights, model = trained(True, lambda: keras.optimizers.Adam(0.05))
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
