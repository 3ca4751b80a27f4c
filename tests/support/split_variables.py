"""Keras 3 variables split in two row shards in one process, as ps_variables.py splits them over PS
tasks (SplitVariable), and a small model trained with them, for the unit tests of ps_shards.py and
ps_shard_updates.py."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow.core import Variable
from keras.src.backend.tensorflow.optimizer import TFOptimizer
from tensorflow.python.eager import backprop

from adrun.runtime.tf2.ps_gather import row_reads
from adrun.runtime.tf2.ps_shards import (SplitVariable, gradients_of_whole_variables, slot_reference,
                                         slots_made_like_their_variable)

SPLIT = {"embeddings", "kernel"}


def split_in_two(next_creator: Any, **kwargs: Any) -> Any:
    """A variable creator: the variables named in SPLIT and their slots as 2 row shards (the first
    one row longer when odd), every other variable as asked."""
    initial = kwargs["initial_value"]
    value = tf.convert_to_tensor(initial() if callable(initial) else initial, dtype=kwargs.get("dtype"))
    if kwargs.get("name") not in SPLIT and not isinstance(slot_reference(), SplitVariable):
        return next_creator(**{**kwargs, "initial_value": value})
    cut = (int(value.shape[0]) + 1) // 2
    return SplitVariable([next_creator(**{**kwargs, "initial_value": part, "name": f"{kwargs['name']}/part_{i}"})
                          for i, part in enumerate((value[:cut], value[cut:]))], name=kwargs["name"])


def split_patches(monkeypatch: pytest.MonkeyPatch) -> None:
    """ps_shards.py's patches and the PS lookup (ps_gather.py), undone after the test."""
    for owner, name in ((backprop.GradientTape, "gradient"), (TFOptimizer, "add_variable_from_reference")):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setattr(Variable, "sparse_read", None, raising=False)
    gradients_of_whole_variables()
    slots_made_like_their_variable()
    row_reads()


def trained(split: bool, optimizer: Callable[[], keras.optimizers.Optimizer]) -> tuple[list[np.ndarray], keras.Model]:
    """An Embedding (11 rows, ids repeated within batches) and a Dense layer fit for 2 epochs with
    `optimizer()`, its Embedding and kernel split in two when `split`."""
    keras.utils.set_random_seed(3)
    with tf.variable_creator_scope(split_in_two) if split else contextlib.nullcontext():
        ids = keras.Input((3,), dtype="int32")
        x = keras.layers.Flatten()(keras.layers.Embedding(11, 4)(ids))
        model = keras.Model(ids, keras.layers.Dense(2)(x))
        model.compile(optimizer=optimizer(), loss="mse")
        data = np.random.RandomState(0)
        model.fit(data.randint(-11, 11, (32, 3)), data.randn(32, 2), batch_size=8, epochs=2, verbose=0)
    return model.get_weights(), model
