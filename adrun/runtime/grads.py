"""Gradients seen at `apply_gradients`, kept per graph for capture and for the kernels."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf


@dataclass
class GradientRecord:
    """One `apply_gradients` call: what the optimizer was asked to apply, and what it returned."""

    optimizer: Any
    grads_and_vars: list[tuple[Any, Any]]
    train_op: tf.Operation | None = None
    # the ops the call created, kept where the graph is described rather than rewritten (capture,
    # profile): capture analyses them (`gradient_sync.updates_read_finish_state`)
    new_ops: list[tf.Operation] = field(default_factory=list)


@dataclass
class GraphRecords:
    calls: list[GradientRecord] = field(default_factory=list)
    train_ops: set[str] = field(default_factory=set)  # names of ops that run one training step
    chief_setup_ops: list[tf.Operation] = field(default_factory=list)  # run once by the chief's session
    setup_ops: list[tf.Operation] = field(default_factory=list)  # run once by every worker's session
    wire_bytes_per_step: int = 0  # bytes this worker hands to dense all-reduces per step
    # whether a set of fetched op names controls a training step, decided once per set
    step_fetches: dict[frozenset[str], bool] = field(default_factory=dict)

    def add_train_op(self, op: tf.Operation) -> None:
        self.train_ops.add(op.name)
        self.step_fetches.clear()  # a fetch that was no step may control the new step op


_records: weakref.WeakKeyDictionary[tf.Graph, GraphRecords] = weakref.WeakKeyDictionary()


def records_for(graph: tf.Graph) -> GraphRecords:
    if graph not in _records:
        _records[graph] = GraphRecords()
    return _records[graph]


def variable_name(var: Any) -> str:
    """The op name that identifies a variable in plans and checkpoints (e.g. `dense/kernel`)."""
    return var.op.name


def is_sparse(grad: Any) -> bool:
    return isinstance(grad, tf.IndexedSlices)
