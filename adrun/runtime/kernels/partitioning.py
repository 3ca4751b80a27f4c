"""Partitioning a variable into shards, done by TF itself.

A planned partition is applied when the script creates the variable: adrun hands
`tf.compat.v1.get_variable` a `fixed_size_partitioner`, so TF builds a PartitionedVariable whose
shards are ordinary variables (each placed and synchronized per its shard's plan). TF then does
the rest: lookups gather only the touched rows of each shard, optimizer slots are sharded with
their variable, and checkpoints store the original name and full shape (SaveSliceInfo).

So only variables the script creates whole through `tf.compat.v1.get_variable` can be
partitioned; others (tf.Variable, Keras layers) and variables read inside control flow are
reported as blocked at plan time and kept whole.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import variable_scope

_CONTROL_FLOW_OPS = {
    "While", "StatelessWhile", "If", "StatelessIf", "Case", "PartitionedCall", "StatefulPartitionedCall",
    "Enter", "RefEnter", "Switch", "RefSwitch",
}


def _created_by_get_variable(graph: tf.Graph) -> set[str]:
    stores = graph.get_collection(variable_scope._VARSTORE_KEY)
    return {name for store in stores for name in store._vars}


def _read_in_control_flow(var) -> bool:
    for consumer in var.op.outputs[0].consumers():
        if consumer.type in _CONTROL_FLOW_OPS or consumer._get_control_flow_context() is not None:
            return True
        for read in consumer.outputs:
            if any(c.type in _CONTROL_FLOW_OPS or c._get_control_flow_context() is not None for c in read.consumers()):
                return True
    return False


def partition_blockers(graph: tf.Graph, variables: list) -> dict[str, str]:
    """Why a variable cannot be partitioned by adrun, by variable name (absent: it can)."""
    created = _created_by_get_variable(graph)
    blockers = {}
    for var in variables:
        name = var.op.name
        if getattr(var, "_save_slice_info", None) is not None:
            blockers[name] = "already partitioned by the script"
        elif name not in created:
            blockers[name] = "created with tf.Variable or a Keras layer, not tf.compat.v1.get_variable"
        elif _read_in_control_flow(var):
            blockers[name] = "read inside control flow (tf.while_loop, tf.cond or a function)"
    return blockers


def partitioner_for(partition) -> object:
    """The TF partitioner that cuts a variable as `partition` (a strategies Partition) says."""
    return tf.compat.v1.fixed_size_partitioner(len(partition.shards), axis=partition.axis)
