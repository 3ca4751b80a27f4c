"""Every worker starts training from the chief's state, whatever the script did before.

A script may initialize and then restore a checkpoint, or restore inside MonitoredTrainingSession;
only the chief's result counts. So right before each worker's first training step:
- variables replicated on the workers (all-reduce, and unplanned state when no PS is used) get the
  chief's values by a collective broadcast (one per dtype, all variables flattened together);
- non-chief workers start only after the chief's initialization or restore: their broadcast receive
  waits for the chief's send at its own first step. Without a broadcast (every variable on a PS)
  they wait for a start token the chief puts on PS 0 at its first step instead. Never both: a run
  with collectives must not wait on a PS queue (see step_order.py).
"""

from __future__ import annotations

from collections import defaultdict

import tensorflow as tf

from adrun.runtime.kernels.allreduce_sync import GROUP_KEY, instance_key
from adrun.runtime.kernels.devices import ps_device


def _broadcast_from_chief(variables: list, num_workers: int, is_chief: bool) -> list[tf.Operation]:
    by_dtype: dict[tf.DType, list] = defaultdict(list)
    for var in variables:
        by_dtype[var.dtype.base_dtype].append(var)
    ops = []
    for dtype, same in sorted(by_dtype.items(), key=lambda item: item[0].name):
        key = instance_key("adrun/start/" + dtype.name + "/" + ",".join(v.op.name for v in same))
        sizes = [v.shape.num_elements() for v in same]
        if is_chief:
            buffer = tf.concat([tf.reshape(v.read_value(), [-1]) for v in same], axis=0)
            ops.append(tf.raw_ops.CollectiveBcastSendV2(
                input=buffer, group_size=num_workers, group_key=GROUP_KEY, instance_key=key).op)
            continue
        buffer = tf.raw_ops.CollectiveBcastRecvV2(
            group_size=num_workers, group_key=GROUP_KEY, instance_key=key, shape=[sum(sizes)], T=dtype)
        for var, piece in zip(same, tf.split(buffer, sizes), strict=True):
            ops.append(var.assign(tf.reshape(piece, var.shape), read_value=False))
    return ops


def _start_tokens(num_workers: int, worker: int) -> list[tf.Operation]:
    def queue(w: int) -> tf.queue.FIFOQueue:
        with tf.device(ps_device(0)):
            return tf.queue.FIFOQueue(1, tf.int64, shapes=[[]], shared_name=f"adrun/start/w{w}", name="adrun_start")

    if worker == 0:
        return [queue(w).enqueue(tf.constant(0, tf.int64)) for w in range(1, num_workers)]
    return [tf.group(queue(worker).dequeue())]


def build_start_op(
    graph: tf.Graph, devices: dict[str, str], local_device: str, worker: int, num_workers: int, uses_ps: bool
) -> tf.Operation | None:
    """The op to run once before this worker's first training step (None on a 1-worker job)."""
    if num_workers == 1:
        return None
    with graph.as_default(), tf.name_scope("adrun_start"):
        replicated = [v for v in tf.compat.v1.global_variables() if devices[v.op.name] == local_device]
        if replicated:
            ops = _broadcast_from_chief(replicated, num_workers, worker == 0)
        elif uses_ps:
            ops = _start_tokens(num_workers, worker)
        else:
            ops = []
        return tf.group(*ops, name="start") if ops else None
