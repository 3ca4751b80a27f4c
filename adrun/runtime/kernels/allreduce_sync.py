"""All-reduce gradient synchronization with TF's collective ops (CollectiveReduceV2 / GatherV2).

Dense gradients of one plan group are flattened into one buffer, averaged across all workers by a
single collective (merge Add, final Div) and split back. Sparse gradients are all-gathered
(indices and values, padded to the longest worker's length and unpadded after) and their values
divided by N, so a row touched by one worker of N gets 1/N of that worker's gradient.
"""

from __future__ import annotations

import zlib
from collections import defaultdict

import tensorflow as tf

GROUP_KEY = 1


def instance_key(label: str) -> int:
    """A key every worker derives identically from the same label (collectives pair up by key)."""
    return 1 + (zlib.crc32(label.encode()) & 0x3FFFFFFF)


def _all_reduce_mean(buffer: tf.Tensor, num_workers: int, label: str) -> tf.Tensor:
    return tf.raw_ops.CollectiveReduceV2(
        input=buffer,
        group_size=num_workers,
        group_key=GROUP_KEY,
        instance_key=instance_key(label),
        ordering_token=[],
        merge_op="Add",
        final_op="Div",
    )


def _all_gather(t: tf.Tensor, num_workers: int, label: str) -> tf.Tensor:
    return tf.raw_ops.CollectiveGatherV2(
        input=t,
        group_size=num_workers,
        group_key=GROUP_KEY,
        instance_key=instance_key(label),
        ordering_token=[],
    )


def all_reduce_dense_groups(named_grads: list[tuple[str, int, tf.Tensor]], num_workers: int) -> dict[str, tf.Tensor]:
    """Mean of each dense gradient over all workers, one collective per plan group."""
    groups: dict[int, list[tuple[str, tf.Tensor]]] = defaultdict(list)
    for name, group, grad in named_grads:
        groups[group].append((name, grad))
    averaged: dict[str, tf.Tensor] = {}
    for group, members in sorted(groups.items()):
        by_dtype: dict[tf.DType, list[tuple[str, tf.Tensor]]] = defaultdict(list)
        for name, grad in members:
            by_dtype[grad.dtype.base_dtype].append((name, grad))
        for dtype, same_dtype in by_dtype.items():
            names = [n for n, _ in same_dtype]
            label = f"adrun/allreduce/{group}/{dtype.name}/" + ",".join(names)
            with tf.name_scope("adrun_allreduce"):
                flat = [tf.reshape(g, [-1]) for _, g in same_dtype]
                sizes = [tf.size(f) for f in flat]
                reduced = _all_reduce_mean(tf.concat(flat, axis=0), num_workers, label)
                for (name, grad), piece in zip(same_dtype, tf.split(reduced, tf.stack(sizes), num=len(flat))):
                    averaged[name] = tf.reshape(piece, tf.shape(grad))
    return averaged


def all_gather_sparse_mean(name: str, grad: tf.IndexedSlices, num_workers: int) -> tf.IndexedSlices:
    """Every worker's rows, values divided by N (duplicates are left to the optimizer to sum)."""
    label = f"adrun/allgather/{name}"
    with tf.name_scope("adrun_allgather"):
        count = tf.shape(grad.indices, out_type=tf.int64)[:1]
        counts = _all_gather(count, num_workers, label + "/count")
        longest = tf.reduce_max(counts)
        pad = longest - count[0]
        indices = tf.pad(tf.cast(grad.indices, tf.int64), [[0, pad]])
        values = tf.pad(grad.values, tf.concat([[[0, pad]], tf.zeros([tf.rank(grad.values) - 1, 2], tf.int64)], 0))
        all_indices = _all_gather(indices, num_workers, label + "/indices")
        all_values = _all_gather(values, num_workers, label + "/values")
        keep = tf.reshape(tf.sequence_mask(counts, longest), [-1])
        kept_values = tf.boolean_mask(all_values, keep) / tf.cast(num_workers, grad.values.dtype)
        kept_indices = tf.cast(tf.boolean_mask(all_indices, keep), grad.indices.dtype)
        return tf.IndexedSlices(kept_values, kept_indices, grad.dense_shape)
