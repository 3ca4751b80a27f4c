"""In-graph replication: one copy of the training step per local device, inside one worker.

The script builds its forward and backward pass once. At `apply_gradients` adrun finds the
*replicated region*: the ops that depend on a batch input (a placeholder or an iterator's
`get_next` output with a first axis) and that the gradients depend on. The original ops of the
region become replica 0; a copy per further device is imported from the graph's own GraphDef
with that device set. Replica k reads the k-th contiguous slice of every batch input along its
first axis (uneven remainders go to the first replicas, as `numpy.array_split` does), and the
worker's gradient is the replicas' gradients weighted by their share of the batch: for a loss
that is a mean over the batch that is exactly the gradient of the whole batch, however the batch
divides. Everything outside the region (variables and their reads, constants, the learning rate)
is shared by the replicas, so a replica is only compute, never extra state.

Tensors of the region used outside it (by ops the script built after the optimizer, such as
metrics or batch-norm updates, and by `session.run` fetches) are replaced by their merge over the
replicas: tensors with the batch on their first axis are concatenated, other floating-point
tensors (losses, batch means) are averaged with the same weights, integer ones (counts) summed.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import graph_pb2
from tensorflow.python.util import nest

from adrun.runtime.graph_edit import unfinalized
from adrun.runtime.kernels.upstream import upstream_ops

BATCH_INPUT_TYPES = frozenset({
    "Placeholder", "PlaceholderV2", "PlaceholderWithDefault",
    "IteratorGetNext", "IteratorGetNextSync", "OptionalGetValue",
    "QueueDequeueManyV2", "QueueDequeueUpToV2",
})
SCOPE = "adrun_replicas"


class ReplicationError(RuntimeError):
    """The training step cannot be split into replicas; the message says why."""


def _grad_tensors(grad: Any) -> list[tf.Tensor]:
    if isinstance(grad, tf.IndexedSlices):
        return [t for t in (grad.values, grad.indices, grad.dense_shape) if t is not None]
    return [grad]


def _downstream_within(starts: Sequence[tf.Tensor], allowed: set[str]) -> set[str]:
    """Names of the ops in `allowed` that depend on `starts` through data edges."""
    region: set[str] = set()
    stack = [c for t in starts for c in t.consumers()]
    while stack:
        op = stack.pop()
        if op.name in region or op.name not in allowed:
            continue
        region.add(op.name)
        stack.extend(c for out in op.outputs for c in out.consumers())
    return region


def batch_inputs(graph: tf.Graph, upstream: set[str]) -> list[tf.Tensor]:
    """The batch inputs the gradients depend on: outputs of placeholders and iterators whose
    rank is known and at least 1 (scalars such as a learning rate or a keep probability are
    shared by the replicas, not split)."""
    inputs = []
    for name in sorted(upstream):
        op = graph.get_operation_by_name(name)
        if op.type in BATCH_INPUT_TYPES:
            inputs += [t for t in op.outputs if t.shape.rank is not None and t.shape.rank >= 1]
    return inputs


def relax_batch_dimension(dataset: Any) -> Any:
    """`dataset` with the first axis of its elements' static shapes unknown.

    With `batch(..., drop_remainder=True)` the batch size is static, and Keras layers bake it into
    constants (Flatten's reshape to [32, -1]) that a replica's slice would not fit. Seen as unknown,
    the model is built with dynamic shapes instead; the data is unchanged.
    """
    from tensorflow.python.data.ops import dataset_ops

    def relax(tensor: Any) -> Any:
        if isinstance(tensor, tf.Tensor) and tensor.shape.rank and tensor.shape[0] is not None:
            return tf.compat.v1.placeholder_with_default(tensor, [None, *tensor.shape[1:]])
        return tensor

    def relax_element(*components: Any) -> Any:
        return nest.map_structure(relax, components[0] if len(components) == 1 else components)

    return dataset_ops.DatasetV1Adapter(dataset.map(relax_element))


def _slice_bounds(batch: tf.Tensor, k: int, count: int) -> tuple[tf.Tensor, tf.Tensor]:
    """First row and row count of slice `k` of `count` over `batch` rows (array_split order)."""
    base, extra = batch // count, batch % count
    size = base + tf.cast(k < extra, tf.int32)
    return k * base + tf.minimum(k, extra), size


def _has_resource_input(op: tf.Operation) -> bool:
    # Ops that take a variable handle run where TF's placer colocates them with the resource.
    return any(t.dtype == tf.resource for t in op.inputs)


class Replication:
    """The replicas of one graph's training step; see the module docstring."""

    def __init__(self, graph: tf.Graph, grads: Sequence[Any], devices: Sequence[str]) -> None:
        if len(devices) < 2:
            raise ValueError("replication needs at least two devices")
        self.graph = graph
        self.count = len(devices)
        upstream = {op.name for op in upstream_ops(t.op for g in grads for t in _grad_tensors(g))}
        inputs = batch_inputs(graph, upstream)
        if not inputs:
            raise ReplicationError(
                "the gradients depend on no batch input (a placeholder or a tf.data iterator with a first "
                "axis), so there is no batch to split across in-graph replicas; set `replicas: 1` for this node"
            )
        self.region = _downstream_within(inputs, upstream)
        self.batch_dim = inputs[0].shape[0]
        self._merged: dict[str, tf.Tensor] = {}
        graph_def = graph.as_graph_def()  # before any slice exists: copies must not see replica 0's
        with graph.as_default(), graph.name_scope(SCOPE + "/"), tf.control_dependencies(None):
            self._slices = {t.name: self._slice_all(t) for t in inputs}  # by batch input name
            rows = tf.shape(inputs[0], out_type=tf.int32)[0]
            sizes = [_slice_bounds(rows, k, self.count)[1] for k in range(self.count)]
            total = tf.cast(tf.maximum(rows, 1), tf.float32)
            self.shares = [tf.cast(s, tf.float32) / total for s in sizes]
            for k in range(1, self.count):
                self._import_copy(graph_def, k, devices[k])
        self._make_replica_zero(devices[0])

    def _slice_all(self, batch: tf.Tensor) -> list[tf.Tensor]:
        rows = tf.shape(batch, out_type=tf.int32)[0]
        slices = []
        for k in range(self.count):
            begin, size = _slice_bounds(rows, k, self.count)
            slices.append(batch[begin: begin + size])
        return slices

    def _import_copy(self, graph_def: graph_pb2.GraphDef, k: int, device: str) -> None:
        graph = self.graph
        sub = graph_pb2.GraphDef()
        sub.versions.CopyFrom(graph_def.versions)
        sub.library.CopyFrom(graph_def.library)
        input_map: dict[str, tf.Tensor] = {}
        outside_controls: dict[str, list[str]] = {}
        for original in graph_def.node:
            if original.name not in self.region:
                continue
            node = sub.node.add()
            node.CopyFrom(original)
            op = graph.get_operation_by_name(node.name)
            node.device = "" if _has_resource_input(op) else device
            if "_class" in node.attr:  # colocation with ops of replica 0
                del node.attr["_class"]
            del node.input[:]
            for ref in original.input:
                source = ref.lstrip("^").split(":")[0]
                if source in self.region:
                    node.input.append(ref)
                elif ref.startswith("^"):
                    outside_controls.setdefault(node.name, []).append(source)
                else:
                    node.input.append(ref)
                    tensor = graph.get_tensor_by_name(ref if ":" in ref else f"{ref}:0")
                    input_map[ref] = self._slices[tensor.name][k] if tensor.name in self._slices else tensor
        tf.graph_util.import_graph_def(sub, input_map=input_map, name=f"r{k}")
        for name, sources in outside_controls.items():
            graph.get_operation_by_name(f"{SCOPE}/r{k}/{name}")._add_control_inputs(
                [graph.get_operation_by_name(s) for s in sources]
            )

    def _make_replica_zero(self, device: str) -> None:
        for name in self.region:
            op = self.graph.get_operation_by_name(name)
            for i, t in enumerate(op.inputs):
                if t.name in self._slices:
                    op._update_input(i, self._slices[t.name][0])
            if not op.device and not _has_resource_input(op):
                op._set_device(device)

    def replica_tensors(self, tensor: tf.Tensor) -> list[tf.Tensor]:
        """`tensor` as computed by each replica (the same tensor K times outside the region)."""
        if tensor.op.name not in self.region:
            return [tensor] * self.count
        return [tensor] + [
            self.graph.get_tensor_by_name(f"{SCOPE}/r{k}/{tensor.name}") for k in range(1, self.count)
        ]

    def _scaled(self, parts: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        """Each replica's part times its share of the batch. multiply_no_nan: an empty slice (a
        batch smaller than the replica count) has a NaN mean and a zero share, and adds nothing."""
        return [tf.math.multiply_no_nan(p, tf.cast(s, p.dtype)) for p, s in zip(parts, self.shares, strict=True)]

    def combine_gradient(self, grad: Any) -> Any:
        """The worker's gradient: the replicas' gradients weighted by their share of the batch."""
        if grad is None or not any(t.op.name in self.region for t in _grad_tensors(grad)):
            return grad
        with self.graph.as_default(), self.graph.name_scope(SCOPE + "/combine/"), tf.control_dependencies(None):
            if isinstance(grad, tf.IndexedSlices):
                values = tf.concat(self._scaled(self.replica_tensors(grad.values)), axis=0)
                indices = tf.concat(self.replica_tensors(grad.indices), axis=0)
                return tf.IndexedSlices(values, indices, grad.dense_shape)
            return tf.add_n(self._scaled(self.replica_tensors(grad)))

    def merged(self, tensor: tf.Tensor) -> tf.Tensor:
        """`tensor` over the whole batch: its replicas' values merged (see the module docstring)."""
        if tensor.op.name not in self.region:
            return tensor
        if tensor.name not in self._merged:
            with unfinalized(self.graph), self.graph.as_default(), \
                    self.graph.name_scope(SCOPE + "/merge/"), tf.control_dependencies(None):
                parts = self.replica_tensors(tensor)
                if self._is_batch_major(tensor):
                    merged = tf.concat(parts, axis=0)
                elif tensor.dtype.is_floating:
                    merged = tf.add_n(self._scaled(parts))
                elif tensor.dtype.is_integer:
                    merged = tf.add_n(parts)
                else:
                    merged = tensor
            self._merged[tensor.name] = merged
        return self._merged[tensor.name]

    def _is_batch_major(self, tensor: tf.Tensor) -> bool:
        shape = tensor.shape
        return shape.rank is not None and shape.rank >= 1 and (shape[0] is None or shape[0] == self.batch_dim)

    def rewire_consumers(self) -> None:
        """Point every op outside the region (and outside adrun's own) at merged tensors."""
        for op in self.graph.get_operations():
            if op.name in self.region or op.name.startswith(SCOPE + "/"):
                continue
            for i, t in enumerate(op.inputs):
                if t.op.name in self.region:
                    op._update_input(i, self.merged(t))

    def merged_fetches(self, fetches: Any) -> Any:
        """`session.run` fetches with every tensor of the region replaced by its merge."""
        def merge(leaf: Any) -> Any:
            if isinstance(leaf, str) and ":" in leaf:
                try:
                    element = self.graph.as_graph_element(leaf)
                except (KeyError, ValueError):
                    return leaf  # the session reports a bad name in its own words
                return self.merged(element).name if element.op.name in self.region else leaf
            if isinstance(leaf, tf.Tensor) and leaf.graph is self.graph:
                return self.merged(leaf)
            return leaf

        return _map_fetches(merge, fetches)


def _map_fetches(fn: Callable[[Any], Any], fetches: Any) -> Any:
    """`fn` applied to every leaf of a `session.run` fetch structure, the structure kept. Unlike
    `nest`, dict keys may be any objects (MonitoredSession keys its hooks' fetches by hook)."""
    if isinstance(fetches, list):
        return [_map_fetches(fn, f) for f in fetches]
    if isinstance(fetches, tuple):
        mapped = [_map_fetches(fn, f) for f in fetches]
        return type(fetches)(*mapped) if hasattr(fetches, "_fields") else type(fetches)(mapped)
    if isinstance(fetches, MutableMapping):  # session.run fills a new one of the type: it must be mutable
        out = copy.copy(fetches)
        for key, value in fetches.items():
            out[key] = _map_fetches(fn, value)
        return out
    return fn(fetches)


_replications: weakref.WeakKeyDictionary[tf.Graph, Replication] = weakref.WeakKeyDictionary()


def replicate(graph: tf.Graph, grads_and_vars: list[tuple[Any, Any]], devices: Sequence[str]) -> list[tuple[Any, Any]]:
    """Split this training step over `devices` and return the pairs with combined gradients."""
    if graph in _replications:
        raise ReplicationError(
            "in-graph replication supports one optimizer step (apply_gradients) per graph; this script "
            "has several: set `replicas: 1` for this node"
        )
    replication = Replication(graph, [g for g, _ in grads_and_vars if g is not None], devices)
    _replications[graph] = replication
    return [(replication.combine_gradient(g), v) for g, v in grads_and_vars]


def replication_of(graph: tf.Graph) -> Replication | None:
    return _replications.get(graph)
