"""Synchronous parameter-server gradient aggregation with TF's conditional accumulators.

Every worker pushes its gradient into an accumulator that lives on the variable's PS. The chief
takes the aggregate once all N gradients are in, applies the update and releases the other
workers through one token queue per worker (a worker can only take its own token, so a fast worker
can never use a slow worker's token to start a second step early).

Accumulators run with reduction SUM and the mean is taken by dividing by N: TF's MEAN for sparse
accumulators averages each row over the workers that touched it, which is not data-parallel SGD
(a row touched by one of N workers must get 1/N of its gradient).
"""

from __future__ import annotations

import tensorflow as tf

from adrun.runtime.kernels.devices import ps_device

# Never reject a gradient as stale: the token queues already keep workers in lock step.
_ACCEPT_ALWAYS = tf.int64.max


def merge_duplicate_rows(grad: tf.IndexedSlices) -> tf.IndexedSlices:
    """Sum rows with equal indices and sort by index, as the sparse accumulator expects."""
    ids, positions = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, positions, tf.size(ids))
    order = tf.argsort(ids)
    return tf.IndexedSlices(tf.gather(values, order), tf.gather(ids, order), grad.dense_shape)


class PSAggregation:
    """Push (every worker) and take (the chief) ops for one variable's gradient."""

    def __init__(self, var_name: str, grad, ps_task: int, num_workers: int) -> None:
        self.device = ps_device(ps_task)
        self.num_workers = num_workers
        dtype = grad.dtype.base_dtype
        shared = f"adrun/accumulator/{var_name}"
        self.sparse = isinstance(grad, tf.IndexedSlices)
        if self.sparse:
            local = merge_duplicate_rows(grad)
            dense_shape = grad.dense_shape
            with tf.device(self.device):
                self._acc = tf.compat.v1.SparseConditionalAccumulator(
                    dtype, shape=None, shared_name=shared, reduction_type="SUM", name="adrun_sparse_acc"
                )
                self.push = self._acc.apply_indexed_slices_grad(
                    tf.IndexedSlices(local.values, tf.cast(local.indices, tf.int64), tf.cast(dense_shape, tf.int64)),
                    local_step=_ACCEPT_ALWAYS,
                )
            self._index_dtype = grad.indices.dtype
            self._dense_shape = dense_shape
        else:
            with tf.device(self.device):
                self._acc = tf.compat.v1.ConditionalAccumulator(
                    dtype, shape=grad.shape, shared_name=shared, reduction_type="SUM", name="adrun_acc"
                )
                self.push = self._acc.apply_grad(grad, local_step=_ACCEPT_ALWAYS)

    def take_mean(self):
        """The mean over all workers' gradients; blocks until every worker has pushed."""
        with tf.device(self.device), tf.control_dependencies([self.push]):
            n = self.num_workers
            if self.sparse:
                total = self._acc.take_indexed_slices_grad(n)
                return tf.IndexedSlices(
                    total.values / tf.cast(n, total.values.dtype),
                    tf.cast(total.indices, self._index_dtype),
                    self._dense_shape,
                )
            total = self._acc.take_grad(n)
            return total / tf.cast(n, total.dtype)


class StepTokens:
    """Per-worker token queues on PS 0 that end a synchronous step for the non-chief workers."""

    def __init__(self, call_index: int, num_workers: int) -> None:
        self.num_workers = num_workers
        self.call_index = call_index

    def _queue(self, worker: int) -> tf.queue.FIFOQueue:
        with tf.device(ps_device(0)):
            return tf.queue.FIFOQueue(
                2, tf.int64, shapes=[[]],
                shared_name=f"adrun/step_tokens/{self.call_index}/w{worker}",
                name=f"adrun_step_tokens_w{worker}",
            )

    def release_all(self, after: tf.Operation) -> tf.Operation:
        """Chief: once `after` (the update) has run, give every other worker one token."""
        with tf.control_dependencies([after]):
            enqueues = [self._queue(w).enqueue(tf.constant(0, tf.int64)) for w in range(1, self.num_workers)]
            return tf.group(after, *enqueues, name="adrun_sync_step")

    def wait_own(self, worker: int, after: list) -> tf.Operation:
        """Non-chief: once `after` (the pushes) has run, wait for this worker's token."""
        with tf.control_dependencies(after):
            token = self._queue(worker).dequeue()
        return tf.group(token, name="adrun_sync_step")
