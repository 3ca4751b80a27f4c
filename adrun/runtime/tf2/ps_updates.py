"""Keras 3 optimizer updates of a variable held whole on a PS run on that PS, in a parameter-server plan.

Keras 3's TensorFlow optimizer updates each variable through `distribution.extended.update`, which
under TF's default strategy places nothing: every op of `update_step` (the learning rate times the
gradient, Adam's moments) ran on the worker, so the chief's mean gradient, already summed on the
PS (ps_exchange.py), came to the chief and went back as the update (measured on the sparse Keras
workload under PSLoadBalancing: 1.9x the byte bound, most of it the 1 MB logits kernel's round
trip). Graph mode's PS plans place a variable's update ops with the variable; here each variable's
update runs under its PS's device scope, so the mean stays where it was summed and a worker's own
apply (asynchronous and bounded-staleness plans) sends its gradient to the PS once. A split
variable (PartitionedPS) has no one device: its update stays on the worker, which sends each shard
its slice. The ops and their kernels are the same, only their device changes.
"""

from __future__ import annotations

import contextlib
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from adrun.runtime.tf2.ps_shards import shards_of


def on_its_ps(variable: Any) -> contextlib.AbstractContextManager[Any]:
    """The device scope of `variable` (a Keras or TF variable) when one tf.Variable holds it, else
    no scope."""
    shards = shards_of(variable)
    if len(shards) == 1 and isinstance(shards[0], resource_variable_ops.BaseResourceVariable) and shards[0].device:
        return tf.device(shards[0].device)
    return contextlib.nullcontext()


def updates_on_their_ps() -> None:
    """Patch Keras 3's TensorFlow optimizer: each variable's update step under its variable's device."""
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    keras_step = TFOptimizer._distributed_tf_update_step

    def _distributed_tf_update_step(self: Any, distribution: Any, grads_and_vars: Any, learning_rate: Any) -> None:
        for grad, var in grads_and_vars:
            with on_its_ps(var):
                keras_step(self, distribution, [(grad, var)], learning_rate)

    TFOptimizer._distributed_tf_update_step = _distributed_tf_update_step
