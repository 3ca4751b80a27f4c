"""ps_shard_updates.py in one process: a split variable's Keras 3 update runs shard by shard (the
shards and their slots' shards are what the update step sees) and trains as the plain model (within 1e-6);
an update rule that is not element-wise keeps the whole update; a chief's joined mean is updated from
its parts, the join read by nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow.optimizer import TFOptimizer

from adrun.runtime.tf2.ps_shard_updates import element_wise, known_parts
from adrun.runtime.tf2.ps_shards import SplitVariable, joined, split_gradient
from adrun.runtime.tf2.ps_updates import updates_on_their_ps
from tests.support.split_variables import split_in_two, split_patches, trained

OPTIMIZERS: dict[str, Callable[[], keras.optimizers.Optimizer]] = {
    "adam": lambda: keras.optimizers.Adam(0.05),
    "sgd-nesterov": lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "rmsprop-centered": lambda: keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "ftrl": lambda: keras.optimizers.Ftrl(0.05, l1_regularization_strength=0.01, l2_shrinkage_regularization_strength=0.01),
}


def _updated(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each update step was given as its variable, as training goes, with ps_updates.py's patch."""
    monkeypatch.setattr(TFOptimizer, "_distributed_tf_update_step", TFOptimizer._distributed_tf_update_step)
    seen: list[Any] = []
    keras_step = TFOptimizer._distributed_tf_update_step

    def recorded(self: Any, distribution: Any, grads_and_vars: Any, learning_rate: Any) -> None:
        seen.extend(var for _, var in grads_and_vars)
        keras_step(self, distribution, grads_and_vars, learning_rate)

    monkeypatch.setattr(TFOptimizer, "_distributed_tf_update_step", recorded)
    updates_on_their_ps()
    return seen


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_split_variable_is_updated_shard_by_shard_as_the_whole_one_is(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    plain, _ = trained(False, OPTIMIZERS[name])
    split_patches(monkeypatch)
    seen = _updated(monkeypatch)
    weights, model = trained(True, OPTIMIZERS[name])
    embeddings, kernel, _ = (w.value for w in model.weights)
    # each split variable's update step saw its two shards, never the variable whole
    assert {id(v) for v in seen} >= {id(s) for s in (*embeddings.variables, *kernel.variables)}
    assert not any(isinstance(v, SplitVariable) for v in seen)
    # within float rounding: TF's element-wise kernels may round an element differently over a
    # shard than over the whole (centered RMSprop: 16 of 44 elements by up to 6e-8; the others equal)
    for got, expected in zip(weights, plain, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_an_update_rule_that_is_not_element_wise_updates_the_whole_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lamb scales each update by the norms of the whole variable and update: per shard would differ."""
    lamb = lambda: keras.optimizers.Lamb(0.05)  # noqa: E731
    plain, _ = trained(False, lamb)
    split_patches(monkeypatch)
    seen = _updated(monkeypatch)
    weights, model = trained(True, lamb)
    embeddings, kernel, _ = (w.value for w in model.weights)
    assert {id(embeddings), id(kernel)} <= {id(v) for v in seen}
    for got, expected in zip(weights, plain, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_element_wise_update_rules() -> None:
    class Mine(keras.optimizers.Adam):
        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
            super().update_step(gradient * 2.0, variable, learning_rate)

    class Named(keras.optimizers.SGD):
        pass

    assert all(element_wise(make()) for make in OPTIMIZERS.values())
    assert element_wise(keras.optimizers.AdamW()) and element_wise(Named())
    assert not any(element_wise(o) for o in (keras.optimizers.Lamb(), keras.optimizers.Adafactor(), Mine()))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "rows"])
def test_a_joined_mean_is_updated_from_its_parts_and_the_join_is_read_by_nothing(
        monkeypatch: pytest.MonkeyPatch, sparse: bool) -> None:
    """As the chief's synchronous apply (ps_apply.py): Keras's apply gets the join of the shards'
    means, the update steps take the parts. In the traced step nothing but TF's identities reads the
    join, so no mean crosses to the chief; the control, without the parts known, reads it."""
    split_patches(monkeypatch)
    seen = _updated(monkeypatch)
    start = np.concatenate([np.ones([3, 2]), 2 * np.ones([2, 2])]).astype(np.float32)
    with tf.variable_creator_scope(split_in_two):
        kernel = keras.Variable(start, name="kernel")  # 3 + 2 rows
        optimizer = keras.optimizers.Adam(0.1)
        optimizer.build([kernel])
    if sparse:
        whole = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tf.constant([4, 0, 2]),
                                 tf.constant([5, 2]))
    else:
        whole = tf.reshape(tf.range(10.0), [5, 2])
    parts = split_gradient(whole, [3, 2])

    def join_readers(parts_known: bool) -> set[str]:
        @tf.function
        def step() -> None:
            mine = [tf.IndexedSlices(p.values * 1.0, p.indices, p.dense_shape) if sparse else p * 1.0 for p in parts]
            mean = joined([5, 2], [3, 2], mine)
            with known_parts([(mean, mine)] if parts_known else []):
                optimizer.apply([mean], [kernel])
        graph = step.get_concrete_function().graph
        step()
        join = [op for op in graph.get_operations() if op.type == "ConcatV2"]
        return {consumer.type for op in join for out in op.outputs for consumer in _readers(out)}

    assert join_readers(parts_known=True) == set()
    assert join_readers(parts_known=False)  # the control: the update cuts the join it was given
    assert seen and not any(isinstance(v, SplitVariable) for v in seen)  # shard by shard, both times
    # two steps of the same gradient (Adam's moments carried over): as one variable takes them
    reference = keras.Variable(start)
    plain = keras.optimizers.Adam(0.1)
    for _ in range(2):
        plain.apply([whole], [reference])
    np.testing.assert_allclose(np.asarray(kernel), reference.numpy(), rtol=1e-6)


def _readers(tensor: tf.Tensor) -> list[tf.Operation]:
    """The ops that use `tensor`'s value, looking through identities whose output someone uses."""
    found = []
    for consumer in tensor.consumers():
        if consumer.type in ("Identity", "IdentityN"):
            found += [r for out in consumer.outputs for r in _readers(out)]
        else:
            found.append(consumer)
    return found
