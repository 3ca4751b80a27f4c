"""What a TF2 parameter-server step exchanges through its PS tasks: gradient sums, gradient rows,
release and staleness tokens, with graph mode's mathematics (kernels/ps_sync.py).

Graph mode's `tf.compat.v1` wrappers do not carry over to eager workers: in eager mode TF replaces a
queue's shared name by a unique one, gives an accumulator a deleter that destroys it when this
worker's Python object goes, and has no resource form of the sparse accumulator at all. So each
resource here is made once, eagerly, by its raw op with an explicit shared name on its PS device, and
its handle is used by raw ops, eagerly or inside the script's `tf.function` (a captured handle):
- dense gradients of one dtype bound for one PS task are pushed as one flat buffer into one
  accumulator (reduction SUM); the chief takes the sum of all N and divides by N;
- a sparse gradient's rows go, as given, into one queue per non-chief worker on the variable's PS;
  the chief concatenates its own rows and each worker's in worker order and divides by N. Keras 3's
  sparse Adam treats each row on its own (it squares each, duplicates included), so row for row
  these are the very rows one process would see for the union of the workers' batches; for an
  optimizer that takes only their sums per id, ps_apply.py sums them before (as TF2's all-reduce
  path does before its gather: reduction.py);
- each non-chief worker has its own release queue on PS 0, so a fast worker never takes a slow
  worker's token; staleness queues per ordered pair of workers bound how far one runs ahead.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops

from adrun.runtime.kernels.devices import ps_device

# Never reject a gradient as stale: the release tokens already keep workers in lock step.
_ACCEPT_ALWAYS = tf.int64.max

_handles: dict[str, tf.Tensor] = {}  # shared name -> this worker's handle, made once


def _made(shared: str, make: Any) -> tf.Tensor:
    handle = _handles.get(shared)
    if handle is None:
        with tf.init_scope():
            handle = _handles[shared] = make()
    return handle


def _queue(shared: str, task: int, dtypes: list[tf.DType], capacity: int = -1) -> tf.Tensor:
    def make() -> tf.Tensor:
        with tf.device(ps_device(task)):
            return gen_data_flow_ops.fifo_queue_v2(component_types=dtypes, capacity=capacity, shared_name=shared)

    return _made(shared, make)


def _accumulator(shared: str, task: int, dtype: tf.DType, size: int) -> tf.Tensor:
    def make() -> tf.Tensor:
        with tf.device(ps_device(task)):
            return gen_data_flow_ops.resource_conditional_accumulator(
                dtype=dtype, shape=[size], shared_name=shared, reduction_type="SUM")

    return _made(shared, make)


def _token() -> tf.Tensor:
    return tf.constant(0, tf.int64)


class GradientExchange:
    """One synchronous step's pushes (every worker) and means (the chief) of one optimizer's apply."""

    def __init__(self, call: int, num_workers: int, worker: int) -> None:
        self._prefix = f"adrun/{call}"
        self._n = num_workers
        self._worker = worker

    def push(self, planned: list[tuple[str, Any, int]]) -> list[tf.Operation]:
        """A non-chief's pushes of its (name, gradient, PS task) list."""
        pushes = []
        for (task, dtype), members in sorted(_dense_batches(planned).items()):
            buffer = tf.concat([tf.reshape(g, [-1]) for _, g in members], axis=0)
            handle = self._dense_accumulator(task, dtype, members)
            pushes.append(gen_data_flow_ops.resource_accumulator_apply_gradient(handle, _ACCEPT_ALWAYS, buffer))
        for name, grad, task in planned:
            if isinstance(grad, tf.IndexedSlices):
                handle = self._rows(name, task, grad, self._worker)
                pushes.append(gen_data_flow_ops.queue_enqueue_v2(handle, [grad.values, tf.cast(grad.indices, tf.int64)]))
        return pushes

    def means(self, planned: list[tuple[str, Any, int]]) -> dict[str, Any]:
        """The chief's mean over every worker's gradient of each (name, gradient, PS task), made on
        that PS, where the chief's update of the variable runs (ps_updates.py)."""
        n = self._n
        found: dict[str, Any] = {}
        for (task, dtype), members in sorted(_dense_batches(planned).items()):
            buffer = tf.concat([tf.reshape(g, [-1]) for _, g in members], axis=0)
            handle = self._dense_accumulator(task, dtype, members)
            with tf.device(ps_device(task)):
                pushed = gen_data_flow_ops.resource_accumulator_apply_gradient(handle, _ACCEPT_ALWAYS, buffer)
                with tf.control_dependencies([pushed]):
                    total = gen_data_flow_ops.resource_accumulator_take_gradient(handle, n, dtype)
                mean = total / tf.cast(n, dtype)
                pieces = tf.split(mean, [g.shape.num_elements() for _, g in members])
                found.update({name: tf.reshape(p, g.shape) for (name, g), p in zip(members, pieces, strict=True)})
        for name, grad, task in planned:
            if isinstance(grad, tf.IndexedSlices):
                values, indices = [grad.values], [tf.cast(grad.indices, tf.int64)]
                with tf.device(ps_device(task)):
                    for w in range(1, n):
                        v, i = gen_data_flow_ops.queue_dequeue_v2(self._rows(name, task, grad, w),
                                                                [grad.values.dtype, tf.int64])
                        values.append(v)
                        indices.append(i)
                    found[name] = tf.IndexedSlices(tf.concat(values, 0) / tf.cast(n, grad.values.dtype),
                                                   tf.cast(tf.concat(indices, 0), grad.indices.dtype), grad.dense_shape)
        return found

    def _dense_accumulator(self, task: int, dtype: tf.DType, members: list[tuple[str, tf.Tensor]]) -> tf.Tensor:
        size = sum(g.shape.num_elements() for _, g in members)
        return _accumulator(f"{self._prefix}/sum/ps{task}/{dtype.name}", task, dtype, size)

    def _rows(self, name: str, task: int, grad: tf.IndexedSlices, worker: int) -> tf.Tensor:
        return _queue(f"{self._prefix}/rows/{name}/w{worker}", task, [grad.values.dtype, tf.int64], capacity=2)

    def end_step(self, after: list[Any]) -> tf.Operation:
        """Chief: once `after` (its apply) has run, one release token for each other worker.
        Non-chief: once `after` (its pushes) has run, waits for its own token."""
        with tf.control_dependencies(after):
            if self._worker == 0:
                ops = [gen_data_flow_ops.queue_enqueue_v2(self._release(w), [_token()]) for w in range(1, self._n)]
            else:
                ops = [gen_data_flow_ops.queue_dequeue_v2(self._release(self._worker), [tf.int64])[0]]
        return tf.group(*ops)

    def _release(self, worker: int) -> tf.Tensor:
        return _queue(f"{self._prefix}/release/w{worker}", 0, [tf.int64], capacity=2)


def _dense_batches(planned: list[tuple[str, Any, int]]) -> dict[tuple[int, tf.DType], list[tuple[str, tf.Tensor]]]:
    """Dense gradients by (PS task, dtype), each batch sorted by name: one layout on every worker."""
    batches: dict[tuple[int, tf.DType], list[tuple[str, tf.Tensor]]] = defaultdict(list)
    for name, grad, task in planned:
        if not isinstance(grad, tf.IndexedSlices):
            batches[(task, grad.dtype.base_dtype)].append((name, grad))
    for members in batches.values():
        members.sort(key=lambda member: member[0])
    return batches


class StalenessTokens:
    """Bounded staleness as graph mode's StalenessBarrier: the queue (w, u) starts with s tokens;
    after each step u puts one into every (w, u) queue and w takes one from each of its own, so no
    worker's step count exceeds another's by more than s."""

    def __init__(self, call: int, num_workers: int, worker: int, bound: int) -> None:
        self._prefix = f"adrun/{call}/staleness"
        self._n = num_workers
        self._worker = worker
        self._bound = bound

    def _queue(self, waiter: int, producer: int) -> tf.Tensor:
        return _queue(f"{self._prefix}/w{waiter}_from_w{producer}", 0, [tf.int64], capacity=2 * self._bound + 2)

    def fill(self) -> None:
        """Chief, eagerly, once before its first step: the s tokens of slack in every pair's queue."""
        for w in range(self._n):
            for u in range(self._n):
                if w != u:
                    gen_data_flow_ops.queue_enqueue_many_v2(self._queue(w, u), [tf.zeros([self._bound], tf.int64)])

    def after_step(self, step: Any) -> tf.Operation:
        others = [u for u in range(self._n) if u != self._worker]
        with tf.control_dependencies([step]):
            produced = [gen_data_flow_ops.queue_enqueue_v2(self._queue(u, self._worker), [_token()]) for u in others]
        with tf.control_dependencies(produced):
            taken = [gen_data_flow_ops.queue_dequeue_v2(self._queue(self._worker, u), [tf.int64])[0] for u in others]
        return tf.group(*taken)
