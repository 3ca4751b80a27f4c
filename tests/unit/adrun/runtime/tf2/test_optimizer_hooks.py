"""The TF2 hook sees each outermost optimizer apply once, with the gradients it returns applied:
Keras 3 optimizers, a subclass defined after the patch that wraps `apply` (as LossScaleOptimizer
does), and apply_gradients. Runs in a subprocess: the patch changes Keras's classes for good."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

PROGRAM = r"""
import keras, numpy as np, tensorflow as tf
from adrun.runtime.tf2.optimizer_hooks import hook_keras3

class Halve:
    calls = []
    def before(self, optimizer, grads, variables):
        self.calls.append((type(optimizer).__name__, len(grads)))
        return [g / 2 for g in grads]

hook = Halve()
hook_keras3(hook)

class Wrapping(keras.optimizers.SGD):  # defined after the patch, overrides apply, calls the inner one
    def apply(self, grads, trainable_variables=None):
        return super().apply(grads, trainable_variables)

v = keras.Variable(np.ones(3, np.float32))
for opt in (keras.optimizers.SGD(1.0), Wrapping(1.0)):
    opt.apply_gradients([(tf.constant([2.0, 2.0, 2.0]), v)])
traced = keras.optimizers.SGD(1.0)
tf.function(lambda: traced.apply([tf.constant([2.0, 2.0, 2.0])], [v]))()
print(hook.calls, v.numpy().tolist())
"""


def test_each_outermost_apply_is_hooked_once_and_its_gradients_applied() -> None:
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True).stdout
    # three applies of a gradient 2 halved to 1 each: 1 - 3 = -2
    assert out.strip().splitlines()[-1] == "[('SGD', 1), ('Wrapping', 1), ('SGD', 1)] [-2.0, -2.0, -2.0]"
