"""Shared variables are initialized once, by the chief.

On a non-chief worker each variable that lives on a PS has its initializer rewired to assign the
variable its own current value, so running the script's init op cannot overwrite what the chief
initialized (or restored). The session waits (see session_setup) until the chief has initialized
them, since the rewired initializer reads them. Replicated variables initialize locally and are
overwritten with the chief's values at the first step (see start_sync).
"""

from __future__ import annotations

import tensorflow as tf


def _read(var: tf.Variable) -> tf.Tensor:
    if var.op.type == "VarHandleOp":
        return tf.raw_ops.ReadVariableOp(resource=var.op.outputs[0], dtype=var.dtype.base_dtype)
    return tf.identity(var.op.outputs[0])


def _is_initialized(var: tf.Variable) -> tf.Tensor:
    if var.op.type == "VarHandleOp":
        return tf.raw_ops.VarIsInitializedOp(resource=var.op.outputs[0])
    return tf.raw_ops.IsVariableInitialized(ref=var.op.outputs[0])


def keep_shared_initialization(graph: tf.Graph, devices: dict[str, str], local_device: str) -> list[tf.Tensor]:
    """Rewire initializers of variables not on this worker; returns checks that the chief's init is done."""
    ready_checks = []
    with graph.as_default():
        for var in tf.compat.v1.global_variables():
            if devices[var.op.name] == local_device:
                continue
            with tf.control_dependencies(None), tf.name_scope("adrun_init"):
                value = _read(var)
                ready_checks.append(_is_initialized(var))
            var.initializer._update_input(1, value)
    return ready_checks
