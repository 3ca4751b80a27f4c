"""Partitioning a variable into shards, done by TF itself.

A planned partition is applied when the script creates the variable: adrun hands
`tf.compat.v1.get_variable` a `fixed_size_partitioner`, so TF builds a PartitionedVariable whose
shards are ordinary variables (each placed and synchronized per its shard's plan). TF then does
the rest: lookups gather only the touched rows of each shard, optimizer slots are sharded with
their variable, and checkpoints store the original name and full shape (SaveSliceInfo).

So only variables the script creates whole through `tf.compat.v1.get_variable` can be
partitioned; others (tf.Variable, Keras layers) and variables read inside control flow are
reported as blocked at plan time and kept whole, as is a variable whose gradient the script reduces
on its way to the update (tf.clip_by_norm: per shard it would take each shard's norm).

Initial values are those of the unpartitioned variable: the script's initializer is called once
for the full shape, or its initial value (an array, a list, a tensor) taken as one tensor, and TF
slices the result into the shards (see `whole_initial_value`). A variable whose shape is not fully
known when the graph is built cannot be cut; capture reports it as blocked too.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import tensorflow as tf
from tensorflow.python.framework import ops
from tensorflow.python.ops import variable_scope

if TYPE_CHECKING:
    from adrun.strategies.document import Partition

CONTROL_FLOW_OPS = {
    "While", "StatelessWhile", "If", "StatelessIf", "Case", "PartitionedCall", "StatefulPartitionedCall",
    "Enter", "RefEnter", "Switch", "RefSwitch",
}


def _created_by_get_variable(graph: tf.Graph) -> set[str]:
    stores = graph.get_collection(variable_scope._VARSTORE_KEY)
    return {name for store in stores for name in store._vars}


def _read_in_control_flow(var: Any) -> bool:
    for consumer in var.op.outputs[0].consumers():
        if consumer.type in CONTROL_FLOW_OPS or consumer._get_control_flow_context() is not None:
            return True
        for read in consumer.outputs:
            if any(c.type in CONTROL_FLOW_OPS or c._get_control_flow_context() is not None for c in read.consumers()):
                return True
    return False


# Ops that make one value of many elements. A gradient that meets one between tf.gradients and the
# update (tf.clip_by_norm, clip_by_global_norm, a gradient scaled by its own norm) depends on the whole
# variable's gradient: split into shards, each shard's part would be scaled by a statistic of its
# shard alone, and the mathematics would no longer be the plain run's.
_REDUCTIONS = {"Sum", "Mean", "Max", "Min", "Prod", "EuclideanNorm", "L2Loss", "All", "Any", "ArgMax", "ArgMin"}
_GRADIENT_SCOPE = re.compile(r"^(gradients|gradient_tape)(_\d+)?$")
_WALK_LIMIT = 10_000  # ops visited per gradient before giving up (and keeping the variable whole)
REDUCED_GRADIENT = "its gradient passes a reduction (e.g. tf.clip_by_norm) before the update: split, it would be reduced per shard"


def made_by_tf_gradients(op: tf.Operation) -> bool:
    """Whether tf.gradients built `op` (it sits in one of its `gradients[_N]` name scopes)."""
    return any(_GRADIENT_SCOPE.match(part) for part in op.name.split("/")[:-1])


def reduced_on_the_way(grad: Any) -> bool:
    """Whether the tensor handed to apply_gradients comes from tf.gradients' output through a reduction
    (or through more ops than the walk visits: then it is taken as reduced, which only keeps a
    variable whole)."""
    tensor = grad.values if isinstance(grad, tf.IndexedSlices) else grad
    todo, seen = [tensor.op], set[str]()
    while todo:
        op = todo.pop()
        if op.name in seen or made_by_tf_gradients(op):
            continue
        if op.type in _REDUCTIONS or len(seen) >= _WALK_LIMIT:
            return True
        seen.add(op.name)
        todo.extend(t.op for t in op.inputs)
    return False


def partition_blockers(graph: tf.Graph, variables: list, grads_and_vars: list[tuple[Any, Any]]) -> dict[str, str]:
    """Why a variable cannot be partitioned by adrun, by variable name (absent: it can).
    `grads_and_vars` are the pairs the script handed to apply_gradients."""
    created = _created_by_get_variable(graph)
    reduced = {var.op.name for grad, var in grads_and_vars if grad is not None and reduced_on_the_way(grad)}
    blockers = {}
    for var in variables:
        name = var.op.name
        if getattr(var, "_save_slice_info", None) is not None:
            blockers[name] = "already partitioned by the script"
        elif name not in created:
            blockers[name] = "created with tf.Variable or a Keras layer, not tf.compat.v1.get_variable"
        elif not var.shape.is_fully_defined():
            blockers[name] = "its shape is not fully known when the graph is built (an initial value of unknown shape)"
        elif _read_in_control_flow(var):
            blockers[name] = "read inside control flow (tf.while_loop, tf.cond or a function)"
        elif name in reduced:
            blockers[name] = REDUCED_GRADIENT
    return blockers


def partitioner_for(partition: Partition) -> object:
    """The TF partitioner that cuts a variable as `partition` (a strategies Partition) says."""
    return tf.compat.v1.fixed_size_partitioner(len(partition.shards), axis=partition.axis)


def whole_value(var: Any) -> tf.Tensor:
    """The partitioned variable `var` read whole: TF's concatenation of its shards, its last op named
    as the variable.

    A script fetches the plain variable (`sess.run(emb)`), which TF refuses for a PartitionedVariable.
    The tensor is made with the variable, because the script may fetch it once its graph is
    finalized (MonitoredTrainingSession), when no op can be added any more.
    """
    return var.as_tensor()


def whole_initial_value(store: Any, name: str, shape: Any, dtype: Any, initializer: Any) -> Any:
    """The initial value the unpartitioned variable `name` would get, as one tensor for TF to slice.

    Left to itself, TF calls a random initializer once per shard: the values differ from the
    unpartitioned variable's, and each call takes a graph-level seed of its own, which shifts the
    seeds of every random op the script creates afterwards. One call for the full shape, made as
    the plain variable would make it, keeps a seeded script's initial values and later random ops
    exactly those of its plain run.

    Without `shape` the variable takes its shape from its initial value, which TF's partitioner
    reads only from a tf.Tensor: a value (numpy array, list) becomes the tensor the plain variable
    converts it to, its dtype inferred from the value as there, and an initializer taking no
    arguments is called once. A tensor is returned unchanged.
    """
    dtype = tf.as_dtype(dtype).base_dtype
    if initializer is None:
        initializer, from_value = store._get_default_initializer(name=name, shape=shape, dtype=dtype)
        if from_value:
            return initializer
    with ops.init_scope(), tf.name_scope(f"{name}/Initializer/"):
        if not callable(initializer):
            return ops.convert_to_tensor(initializer)
        if shape is None:
            return initializer()
        return initializer(tf.TensorShape(shape).as_list(), dtype=dtype)
