"""Which optimizers take a sparse gradient only through its rows summed per index
(adrun/runtime/tf2/duplicate_rows.py): each decision is checked against the optimizer itself, by
applying the same IndexedSlices with repeated indices and summed per index for three steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from adrun.runtime.tf2.duplicate_rows import sums_duplicate_rows

keras = pytest.importorskip("keras")
tf_keras = pytest.importorskip("tf_keras")

INDICES = [0, 2, 0, 3, 2, 0]
# the Keras 3 rules read (duplicate_rows.py): linear until a dense sum, or densified by accumulation
KERAS3: list[tuple[str, Callable[[], Any], bool]] = [
    ("SGD", lambda: keras.optimizers.SGD(0.1), True),
    ("SGD momentum", lambda: keras.optimizers.SGD(0.1, momentum=0.9), True),
    ("SGD nesterov", lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True), True),
    ("SGD weight decay, EMA", lambda: keras.optimizers.SGD(0.1, weight_decay=0.1, use_ema=True), True),
    ("Lion", lambda: keras.optimizers.Lion(0.1), True),
    ("LossScaleOptimizer(SGD)", lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)), True),
    ("Adam accumulating", lambda: keras.optimizers.Adam(0.1, gradient_accumulation_steps=2), True),
    ("SGD clipnorm", lambda: keras.optimizers.SGD(0.1, clipnorm=0.5), False),
    ("SGD global_clipnorm", lambda: keras.optimizers.SGD(0.1, global_clipnorm=0.5), False),
    ("SGD clipvalue", lambda: keras.optimizers.SGD(0.1, clipvalue=0.3), False),
    ("LossScaleOptimizer(Adam)", lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.1)), False),
] + [(name, (lambda name=name: getattr(keras.optimizers, name)(0.1)), False) for name in
     ("Adam", "AdamW", "Adamax", "Nadam", "Adagrad", "RMSprop", "Adadelta", "Ftrl", "Lamb", "Adafactor")]
# tf_keras sums duplicates in both families; only clipping, which sees the rows first, spoils it
TF_KERAS: list[tuple[str, Callable[[], Any], bool]] = [
    (f"{family} {name}", (lambda module=module, name=name: getattr(module, name)(0.1)), True)
    for family, module, names in (
        ("tf_keras", tf_keras.optimizers, ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Ftrl", "Lion", "Adafactor")),
        ("legacy", tf_keras.optimizers.legacy, ("SGD", "Adam", "Adagrad", "RMSprop", "Ftrl")))
    for name in names
] + [
    ("tf_keras LossScaleOptimizer(Adam)",
     lambda: tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam(0.1)), True),
    ("tf_keras SGD clipvalue", lambda: tf_keras.optimizers.SGD(0.1, clipvalue=0.3), False),
    ("legacy SGD clipnorm", lambda: tf_keras.optimizers.legacy.SGD(0.1, clipnorm=0.5), False),
]


def _trained(make: Callable[[], Any], grad: tf.IndexedSlices) -> np.ndarray:
    var = tf.Variable(np.arange(20, dtype=np.float32).reshape(5, 4) / 10)
    optimizer = make()
    for _ in range(3):
        optimizer.apply_gradients([(grad, var)])
    return var.numpy()


def _repeated_and_summed() -> tuple[tf.IndexedSlices, tf.IndexedSlices]:
    values = tf.constant(np.random.default_rng(0).normal(size=(len(INDICES), 4)).astype(np.float32))
    indices = tf.constant(INDICES, tf.int64)
    unique, positions = tf.unique(indices)
    summed = tf.math.unsorted_segment_sum(values, positions, tf.size(unique))
    return tf.IndexedSlices(values, indices, [5, 4]), tf.IndexedSlices(summed, unique, [5, 4])


@pytest.mark.parametrize(("name", "make", "expected"), KERAS3 + TF_KERAS, ids=[c[0] for c in KERAS3 + TF_KERAS])
def test_the_decision_is_what_the_optimizer_does(name: str, make: Callable[[], Any], expected: bool) -> None:
    assert sums_duplicate_rows(make()) is expected
    repeated, summed = _repeated_and_summed()
    off = float(np.max(np.abs(_trained(make, repeated) - _trained(make, summed))))
    if expected:
        assert off <= 1e-6  # float32 reordering of the same sums
    else:
        assert off > 1e-5  # the summed rows would give another step: they must not be summed


def test_an_overridden_update_rule_keeps_its_rows() -> None:
    class Squared(keras.optimizers.SGD):
        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
            self.assign_sub(variable, keras.ops.square(gradient))

    assert not sums_duplicate_rows(Squared(0.1))


def test_an_optimizer_of_no_known_family_keeps_its_rows() -> None:
    assert not sums_duplicate_rows(object())
