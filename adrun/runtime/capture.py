"""Capture mode: describe the user's graph as a GraphItem and stop the process.

The launcher runs the script once with ADRUN_MODE=capture. The hook writes the GraphItem and exits
before any training happens, at the moment a worker would prepare the graph: when the script
creates a Session on a graph with an optimizer step, or, for a Session created before its model,
at that Session's first run once the graph has one (see pending_sessions.py). There, the script now
known to be a graph-mode script, the installed versions are checked (versions.py): an untested one
is refused by capture, before any run starts.
"""

from __future__ import annotations

import atexit
import os
import sys

import tensorflow as tf

from adrun.exit_codes import HOOK_DONE_EXIT_CODE
from adrun.graph_item import GradKind, GraphItem, VariableInfo, save_graph_item
from adrun.runtime.capture_pooled import pooled_bags
from adrun.runtime.grads import is_sparse, records_for, variable_name
from adrun.runtime.kernels.gradient_sync import updates_read_finish_state
from adrun.runtime.kernels.partitioning import partition_blockers
from adrun.runtime.refusal import refusing
from adrun.runtime.reporting import report
from adrun.runtime.versions import GRAPH
from adrun.task_events import DoneEvent

_graph_at_exit: tf.Graph | None = None


def describe_graph(graph: tf.Graph, examples: int | None = None) -> GraphItem:
    """The GraphItem of `graph`. Shards of a partitioned variable count as the one variable they
    slice (its full name and shape), so a worker whose variables adrun partitioned describes the
    same graph as the capture did. Which variables' lookups could be pooled over their bags on the
    PS, and what they read per step, is capture_pooled.py's; `examples`, the batch the profiling
    run fed (profiler.py), gives their examples when neither their shape nor a tf.data batch
    does (ids fed through a `placeholder([None, L])`)."""
    records = records_for(graph)
    grad_kind: dict[str, GradKind] = {}
    optimizer = None
    reads_state: list[bool | None] = []
    for call in records.calls:
        optimizer = type(call.optimizer).__name__
        names = [variable_name(v) for g, v in call.grads_and_vars if g is not None]
        reads_state.append(updates_read_finish_state(call.new_ops, names))
        for grad, var in call.grads_and_vars:
            if grad is not None:
                grad_kind[_logical(var)[0]] = "sparse" if is_sparse(grad) else "dense"
    with graph.as_default():
        global_vars = tf.compat.v1.global_variables()
        trainable = {_logical(v)[0] for v in tf.compat.v1.trainable_variables()}
        step = tf.compat.v1.train.get_global_step(graph)
    grads_and_vars = [pair for call in records.calls for pair in call.grads_and_vars]
    blockers = partition_blockers(graph, global_vars, grads_and_vars)
    batch_size = static_batch_size(graph)
    pooled = pooled_bags(graph, global_vars, {variable_name(v): _logical(v)[0] for v in global_vars}, grads_and_vars,
                         batch_size if batch_size is not None else examples)
    logical: dict[str, VariableInfo] = {}
    for var in global_vars:
        name, shape = _logical(var)
        if name in logical:
            continue
        logical[name] = VariableInfo(
            name=name,
            shape=shape,
            dtype=var.dtype.base_dtype.name,
            trainable=name in trainable,
            grad=grad_kind.get(name),
            partition_blocker=blockers.get(var.op.name),
            pooled=pooled.get(name),
        )
    return GraphItem(
        variables=list(logical.values()),
        optimizer=optimizer,
        updates_read_step_state=_any_reads(reads_state),
        global_step=variable_name(step) if step is not None else None,
        batch_size=batch_size,
    )


def _any_reads(calls: list[bool | None]) -> bool | None:
    """Whether any call's updates read state its finish changes; None (the planner then goes by
    the optimizer's class) when no call says so and one could not be analysed, or there is none."""
    if any(calls):
        return True
    return False if calls and None not in calls else None


def _logical(var: tf.Variable) -> tuple[str, list[int]]:
    """Name and shape of the variable `var` is, or is a shard of. A size unknown when the graph is
    built is -1; a shape of unknown rank (an initial value of unknown shape) is recorded as [-1]."""
    info = getattr(var, "_save_slice_info", None)
    if info is not None:
        return info.full_name, list(info.full_shape)
    if var.shape.rank is None:
        return variable_name(var), [-1]
    return variable_name(var), [int(d) if d is not None else -1 for d in var.shape.as_list()]


def static_batch_size(graph: tf.Graph) -> int | None:
    """Examples per step when the graph says so: the constant of a tf.data batch op."""
    for op in graph.get_operations():
        if op.type in ("BatchDatasetV2", "BatchDataset", "PaddedBatchDatasetV2"):
            size = tf.get_static_value(op.inputs[1])
            if size is not None:
                return int(size)
    return None


def capture_and_exit(graph: tf.Graph, out_path: str) -> None:
    refusing(GRAPH.check_versions)()
    _write(graph, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(HOOK_DONE_EXIT_CODE)


def capture_at_exit(graph: tf.Graph, out_path: str) -> None:
    """Describe `graph` when the script ends without having been captured (its Session was created
    before the model, and no optimizer step followed), so the launcher can say what is missing."""
    global _graph_at_exit
    if _graph_at_exit is None:
        atexit.register(lambda: _write(_graph_at_exit, out_path))
    _graph_at_exit = graph


def _write(graph: tf.Graph, out_path: str) -> None:
    save_graph_item(describe_graph(graph), out_path)
    report(DoneEvent(out_path))
