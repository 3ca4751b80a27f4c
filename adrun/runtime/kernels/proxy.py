"""Local proxies (`local_proxy: true`) for variables on a PS.

The worker keeps a copy of the variable on its own device; at the start of each step the copy is
refreshed from the PS in one transfer and every read of the variable in the step's forward pass
reads the copy. Updates still go to the PS. Values are exactly those without a proxy; what changes
is that a variable read many times in a step crosses the network once.
"""

from __future__ import annotations

import tensorflow as tf

_READ_OPS = ("ReadVariableOp", "ResourceGather")


def _is_forward_read(op: tf.Operation) -> bool:
    """Reads by the model, not by the optimizer's update, the initializer or a saver."""
    return op.type in _READ_OPS and "/update_" not in op.name and not op.name.startswith(("save", "adrun_"))


def forward_readers(var: tf.Variable) -> list[tf.Operation]:
    """The ops that read `var` for the model (see `_is_forward_read`)."""
    return [op for op in var.op.outputs[0].consumers() if _is_forward_read(op)]


def add_local_proxy(graph: tf.Graph, var: tf.Variable, local_device: str) -> None:
    """Point `var`'s forward reads at a local copy refreshed from the PS before them."""
    handle = var.op.outputs[0]
    readers = forward_readers(var)
    if not readers:
        return
    with graph.as_default(), tf.device(local_device), tf.name_scope("adrun_proxy"):
        proxy = tf.compat.v1.Variable(
            tf.zeros(var.shape, var.dtype.base_dtype), trainable=False, collections=[], name=var.op.name
        )
        with tf.device(None):
            current = tf.raw_ops.ReadVariableOp(resource=handle, dtype=var.dtype.base_dtype)
        refresh = proxy.assign(current, read_value=False)
    for op in readers:
        op._update_input(0, proxy.handle)
        op._add_control_input(refresh)
        if "_class" in op.node_def.attr:
            op._clear_attr("_class")  # TF colocated the read with the PS variable; it now reads the copy
