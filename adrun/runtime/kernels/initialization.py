"""Variables are initialized once, by the chief, and every worker starts from the same values.

On a non-chief worker each global variable's initializer is rewired so that running the user's
init op does not overwrite shared state:
- a variable on a PS is assigned its own current value (the chief has initialized it);
- a variable replicated on this worker (all-reduce) is assigned the chief's replica's value, so
  random initializers without seeds still give identical replicas.
The session waits (see session_setup) until the chief has initialized what these read.
"""

from __future__ import annotations

import tensorflow as tf

from adrun.runtime.grads import variable_name
from adrun.runtime.kernels.devices import CHIEF_DEVICE


def _is_resource(var) -> bool:
    return var.op.type == "VarHandleOp"


def _read(var_op: tf.Operation, dtype: tf.DType) -> tf.Tensor:
    if var_op.type in ("VarHandleOp",):
        return tf.raw_ops.ReadVariableOp(resource=var_op.outputs[0], dtype=dtype)
    return tf.identity(var_op.outputs[0])


def _is_initialized(var_op: tf.Operation) -> tf.Tensor:
    if var_op.type == "VarHandleOp":
        return tf.raw_ops.VarIsInitializedOp(resource=var_op.outputs[0])
    return tf.raw_ops.IsVariableInitialized(ref=var_op.outputs[0])


def _chief_replica(var) -> tf.Operation:
    """An op naming the same variable in the chief's resource manager."""
    shared = var.op.get_attr("shared_name") or var.op.name.encode()
    container = var.op.get_attr("container")
    dtype = var.dtype.base_dtype
    with tf.device(CHIEF_DEVICE), tf.name_scope("adrun_chief_replica"):
        if _is_resource(var):
            return tf.raw_ops.VarHandleOp(dtype=dtype, shape=var.shape, container=container, shared_name=shared).op
        return tf.raw_ops.VariableV2(shape=var.shape, dtype=dtype, container=container, shared_name=shared).op


def share_chief_initialization(graph: tf.Graph, devices: dict[str, str], local_device: str) -> list[tf.Tensor]:
    """Rewire initializers on a non-chief worker; returns checks that the chief's init is done."""
    ready_checks = []
    with graph.as_default():
        for var in tf.compat.v1.global_variables():
            name = variable_name(var)
            replicated_here = devices[name] == local_device
            source = _chief_replica(var) if replicated_here else var.op
            with tf.control_dependencies(None), tf.name_scope("adrun_init"):
                value = _read(source, var.dtype.base_dtype)
                ready_checks.append(_is_initialized(source))
            var.initializer._update_input(1, value)
    return ready_checks
