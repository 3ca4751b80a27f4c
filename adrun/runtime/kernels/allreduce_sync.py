"""All-reduce gradient synchronization with TF's collective ops (CollectiveReduceV2 / GatherV2).

Dense gradients of one plan group (and one dtype and compressor) are flattened into one buffer,
averaged across all workers by a single collective and split back. Sparse gradients are
all-gathered (each worker's distinct indices with its summed rows, padded to the longest worker's
length and unpadded after) and their values divided by N, so a row touched by one worker of N gets
1/N of that worker's gradient.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from adrun.runtime.kernels import compression
from adrun.runtime.kernels.distinct_rows import merged_rows

GROUP_KEY = 1


def instance_key(label: str) -> int:
    """A key every worker derives identically from the same label (collectives pair up by key)."""
    return 1 + (zlib.crc32(label.encode()) & 0x3FFFFFFF)


@dataclass
class Collectives:
    """Builds this worker's collective ops and counts the bytes each step hands to them."""

    num_workers: int
    internal_initializers: list[tf.Operation] = field(default_factory=list)
    wire_bytes: int = 0  # dense all-reduce input bytes per step (sparse sizes are data-dependent)
    _gather_steps: tf.Variable | None = None

    def _count(self, t: tf.Tensor) -> None:
        if t.shape.is_fully_defined():
            self.wire_bytes += t.shape.num_elements() * t.dtype.size

    def _reduce(self, t: tf.Tensor, label: str, final_op: str) -> tf.Tensor:
        return tf.raw_ops.CollectiveReduceV2(
            input=t, group_size=self.num_workers, group_key=GROUP_KEY, instance_key=instance_key(label),
            ordering_token=[], merge_op="Add", final_op=final_op,
        )

    def reduce(self, t: tf.Tensor, label: str, final_op: str = "Div") -> tf.Tensor:
        if self.num_workers == 1:
            return t  # the sum and the mean over one worker are its own tensor: no op, nothing sent
        self._count(t)
        return self._reduce(t, label, final_op)

    def mean(self, t: tf.Tensor, label: str) -> tf.Tensor:
        return self.reduce(t, label, "Div")

    def sum(self, t: tf.Tensor, label: str) -> tf.Tensor:
        return self.reduce(t, label, "Id")

    def barrier(self, label: str, after: list[tf.Operation]) -> tf.Operation:
        """Completes on every worker once every worker has run `after`: a one-number all-gather.

        A worker's gather ends only when it holds every worker's number, so it waits for every
        worker as an all-reduce does, in half the sequential transfers (TF's ring gather passes
        N - 1 times around the ring; its ring all-reduce 2(N - 1) times).
        """
        with tf.name_scope("adrun_barrier"):
            with tf.control_dependencies(after):
                flag = tf.zeros([1])
            return tf.raw_ops.CollectiveGatherV2(
                input=flag, group_size=self.num_workers, group_key=GROUP_KEY,
                instance_key=instance_key(f"adrun/barrier/{label}"), ordering_token=[],
            ).op

    def state_variable(self, initial: Callable[[], tf.Tensor], name: str) -> tf.Variable:
        """A compressor's state: adrun's own variable, initialized at session set-up."""
        # outside the caller's control dependencies: the initializer runs at session set-up
        with tf.control_dependencies(None):
            var = tf.compat.v1.Variable(initial(), trainable=False, collections=[], name=name)
        self.internal_initializers.append(var.initializer)
        return var

    def _step_counter(self) -> tf.Variable:
        """This worker's count of sparse all-gather steps (every worker counts in lockstep)."""
        if self._gather_steps is None:
            with tf.control_dependencies(None):  # its initializer runs at session set-up
                self._gather_steps = tf.compat.v1.Variable(
                    tf.constant(0, tf.int64), trainable=False, collections=[], name="adrun_gather_steps"
                )
            self.internal_initializers.append(self._gather_steps.initializer)
        return self._gather_steps

    def gather(self, t: tf.Tensor, label: str, step: tf.Tensor) -> tf.Tensor:
        """All-gather along axis 0 under a key that changes every step.

        TF's collective runtime remembers an instance's shape by key; padded sparse gathers change
        shape from step to step, so each step needs keys of its own.
        """
        key = (instance_key(label) + step * 7919) % 0x3FFFFFFF + 1
        return tf.raw_ops.CollectiveGatherV2(
            input=t, group_size=self.num_workers, group_key=GROUP_KEY, instance_key=tf.cast(key, tf.int32),
            ordering_token=[],
        )

    def dense_means(self, items: list[tuple[str, Any, tf.Tensor]]) -> dict[str, tf.Tensor]:
        """Mean over workers of each dense gradient; items are (variable name, AllReduceSync, grad)."""
        buffers: dict[tuple, list[tuple[str, tf.Tensor]]] = defaultdict(list)
        low_rank: dict[tuple, list[tuple[str, tf.Tensor, int]]] = defaultdict(list)
        averaged: dict[str, tf.Tensor] = {}
        for name, sync, grad in items:
            if sync.compressor == "powersgd" and compression.powersgd_applies(grad.shape, sync.powersgd_rank):
                low_rank[(sync.group, grad.dtype.base_dtype.name)].append((name, grad, sync.powersgd_rank))
                continue
            compressor = "none" if sync.compressor == "powersgd" else sync.compressor
            if not grad.shape.is_fully_defined():
                compressor = "none"
            buffers[(sync.group, grad.dtype.base_dtype.name, compressor)].append((name, grad))
        for (group, dtype), matrices in sorted(low_rank.items()):
            label = f"adrun/powersgd/{group}/{dtype}/" + ",".join(n for n, _, _ in matrices)
            with tf.name_scope("adrun_powersgd"):
                means = compression.powersgd_means(matrices, self.mean, label, self.state_variable)
            averaged.update({name: m for (name, _, _), m in zip(matrices, means, strict=True)})
        for (group, dtype, compressor), members in sorted(buffers.items()):
            label = f"adrun/allreduce/{group}/{dtype}/{compressor}/" + ",".join(n for n, _ in members)
            with tf.name_scope("adrun_allreduce"):
                if compressor == "fp16":
                    means = compression.fp16_mean([g for _, g in members], self.num_workers, self.sum, label)
                elif compressor == "fp16-ef":
                    means = compression.fp16_ef_mean(members, self.num_workers, self.sum, label, self.state_variable)
                else:
                    means = self._plain_means([g for _, g in members], label)
            averaged.update({name: m for (name, _), m in zip(members, means, strict=True)})
        return averaged

    def _plain_means(self, grads: list[tf.Tensor], label: str) -> list[tf.Tensor]:
        if self.num_workers == 1:
            return list(grads)  # no buffer to pack for a collective of one
        flat = [tf.reshape(g, [-1]) for g in grads]
        sizes = tf.stack([tf.size(f) for f in flat])
        reduced = self.mean(tf.concat(flat, axis=0), label)
        return [tf.reshape(piece, tf.shape(g)) for g, piece in zip(grads, tf.split(reduced, sizes, num=len(flat)), strict=True)]

    def sparse_mean(self, name: str, grad: tf.IndexedSlices, worker: str) -> tf.IndexedSlices:
        """Every worker's rows, values divided by N. Each worker first sums its rows of equal index
        on `worker` (its device), so it gathers each row once; rows of different workers with equal
        indices are left to the optimizer to sum."""
        if self.num_workers == 1:
            return grad
        label = f"adrun/allgather/{name}"
        grad = merged_rows(grad, worker)
        with tf.name_scope("adrun_allgather"):
            counter = self._step_counter()
            step = counter.read_value()

            def advanced(all_indices: tf.Tensor, all_values: tf.Tensor) -> tf.Tensor:
                with tf.control_dependencies([all_indices, all_values]):
                    advance = counter.assign_add(1, read_value=False)
                with tf.control_dependencies([advance]):
                    return tf.identity(all_values)

            return gathered_rows(grad, self.num_workers, lambda t, part: self.gather(t, f"{label}/{part}", step),
                                 advanced)


Gather = Callable[[tf.Tensor, str], tf.Tensor]  # (tensor, part) -> every worker's tensor, along axis 0


def gathered_rows(
    grad: tf.IndexedSlices, num_workers: int, gather: Gather,
    after: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None, counts: tf.Tensor | None = None,
) -> tf.IndexedSlices:
    """Every worker's rows of `grad` (worker order), values divided by N: the row counts are gathered
    first (unless the caller gathered them already: `counts`, int64, one per worker), each worker pads
    its rows to the longest and the padding is dropped after the gather. `after(indices, values)` may
    return the gathered values with dependencies of the caller's."""
    index_dtype = grad.indices.dtype
    count = tf.shape(grad.indices, out_type=tf.int64)[:1]
    if counts is None:
        counts = gather(count, "count")
    # at least one row: a gather of empty tensors (no worker touched this shard) crashes TF
    longest = tf.maximum(tf.reduce_max(counts), 1)
    pad = longest - count[0]
    indices = tf.pad(tf.cast(grad.indices, tf.int64), [[0, pad]])
    value_padding = tf.concat([[[0, pad]], tf.zeros([tf.rank(grad.values) - 1, 2], tf.int64)], 0)
    values = tf.pad(grad.values, value_padding)
    all_indices = gather(indices, "indices")
    all_values = gather(values, "values")
    if after is not None:
        all_values = after(all_indices, all_values)
    keep = tf.reshape(tf.sequence_mask(counts, longest), [-1])
    kept_values = tf.boolean_mask(all_values, keep) / tf.cast(num_workers, grad.values.dtype)
    kept_indices = tf.cast(tf.boolean_mask(all_indices, keep), index_dtype)
    return tf.IndexedSlices(kept_values, kept_indices, grad.dense_shape)
