"""Synchronous parameter-server gradient aggregation with TF's conditional accumulators.

Every worker pushes its gradient into an accumulator that lives on the variable's PS. The chief
takes the aggregate once all N gradients are in, applies the update and releases the other
workers through one token queue per worker (a worker can only take its own token, so a fast worker
can never use a slow worker's token to start a second step early).

A sparse gradient is pushed with one row per distinct index (`distinct_rows.merged_rows`: equal
rows summed on the worker, indices sorted as the accumulator expects). Accumulators run with
reduction SUM and the mean is taken by dividing by N: TF's MEAN for sparse accumulators averages
each row over the workers that touched it, which is not data-parallel SGD (a row touched by one of
N workers must get 1/N of its gradient).

Small dense gradients bound for one PS task share one accumulator (`ps_aggregations`): each worker
pushes them as one flat buffer and the chief takes one sum, split back per variable on the PS. A
push is one tensor sent and one accumulator op whatever its size, so a step of many small
variables paid a round of per-tensor transfers and accumulator ops per variable; the sums and the
division are elementwise, so the batched mean equals the per-variable one exactly. Large gradients
keep their own accumulator: batching saves them nothing, and pushing each alone lets it leave the
worker while the rest of the backward pass still runs.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection, Sequence

import tensorflow as tf

from adrun.runtime.kernels.devices import ps_device
from adrun.runtime.kernels.distinct_rows import merged_rows

# Never reject a gradient as stale: the token queues already keep workers in lock step.
_ACCEPT_ALWAYS = tf.int64.max


# Dense gradients below this size share their PS task's accumulator. Above it a transfer's fixed
# cost (a RecvTensor call, ~0.1-0.5 ms of CPU here) is small beside its bytes even at 1 Gbit/s, and a
# lone push (e.g. a 256 x 1000 layer's 1 MB) leaves while the rest of the backward pass still runs.
BATCH_BELOW_BYTES = 256 * 1024


class PSAggregation:
    """Push (every worker) and take (the chief) ops for one variable's gradient."""

    def __init__(self, var_name: str, grad: tf.Tensor | tf.IndexedSlices, ps_task: int, num_workers: int, worker: str,
                 after: Sequence[tf.Operation] = (), pooled: bool = False) -> None:
        """`worker`: this worker's device, where a sparse gradient's equal rows are summed; the
        gradient leaves it once the ops `after` have run. `pooled`: a sparse gradient whose rows
        are formed on the PS already, one per distinct sorted id (pooled_bags.py)."""
        self.name = var_name
        self.device = ps_device(ps_task)
        self.num_workers = num_workers
        dtype = grad.dtype.base_dtype
        shared = f"adrun/accumulator/{var_name}"
        self.sparse = isinstance(grad, tf.IndexedSlices)
        if self.sparse:
            local = grad if pooled else merged_rows(grad, worker)
            dense_shape = grad.dense_shape
            with tf.device(self.device):
                self._acc = tf.compat.v1.SparseConditionalAccumulator(
                    dtype, shape=None, shared_name=shared, reduction_type="SUM", name="adrun_sparse_acc"
                )
                self.push = self._acc.apply_indexed_slices_grad(
                    # The ids do not wait: they are the distinct ids the forward pass's row gather on
                    # this PS already read (distinct_rows, set up later), and TF sends a tensor to a
                    # task once a step; a waiting copy would be a second tensor, sent again.
                    tf.IndexedSlices(_leaving(local.values, after, worker), local.indices, tf.cast(dense_shape, tf.int64)),
                    local_step=_ACCEPT_ALWAYS,
                )
            self._index_dtype = grad.indices.dtype
            self._dense_shape = dense_shape
        else:
            with tf.device(self.device):
                self._acc = tf.compat.v1.ConditionalAccumulator(
                    dtype, shape=grad.shape, shared_name=shared, reduction_type="SUM", name="adrun_acc"
                )
                self.push = self._acc.apply_grad(_leaving(grad, after, worker), local_step=_ACCEPT_ALWAYS)

    def take_means(self) -> dict[str, tf.Tensor | tf.IndexedSlices]:
        """The mean over all workers' gradients; blocks until every worker has pushed."""
        with tf.device(self.device), tf.control_dependencies([self.push]):
            n = self.num_workers
            if self.sparse:
                total = self._acc.take_indexed_slices_grad(n)
                return {self.name: tf.IndexedSlices(
                    total.values / tf.cast(n, total.values.dtype),
                    tf.cast(total.indices, self._index_dtype),
                    self._dense_shape,
                )}
            total = self._acc.take_grad(n)
            return {self.name: total / tf.cast(n, total.dtype)}


class BatchedPSAggregation:
    """Push and take ops for several small dense gradients of one dtype bound for one PS task:
    one flat buffer, one accumulator, one take per step."""

    def __init__(self, members: list[tuple[str, tf.Tensor]], ps_task: int, num_workers: int, worker: str) -> None:
        """`members`: (variable name, gradient) with static shapes, in an order every worker shares."""
        self.names = [name for name, _ in members]
        self.shapes = [grad.shape for _, grad in members]
        self.device = ps_device(ps_task)
        self.num_workers = num_workers
        dtype = members[0][1].dtype.base_dtype
        digest = hashlib.sha1(",".join(self.names).encode()).hexdigest()[:16]
        shared = f"adrun/accumulator/ps{ps_task}/{dtype.name}/{digest}"
        with tf.device(worker), tf.name_scope("adrun_push_buffer"):
            buffer = tf.concat([tf.reshape(grad, [-1]) for _, grad in members], axis=0)
        with tf.device(self.device):
            self._acc = tf.compat.v1.ConditionalAccumulator(
                dtype, shape=buffer.shape, shared_name=shared, reduction_type="SUM", name="adrun_acc"
            )
            self.push = self._acc.apply_grad(buffer, local_step=_ACCEPT_ALWAYS)

    def take_means(self) -> dict[str, tf.Tensor | tf.IndexedSlices]:
        """Each variable's mean over all workers' gradients; blocks until every worker has pushed."""
        with tf.device(self.device), tf.control_dependencies([self.push]):
            total = self._acc.take_grad(self.num_workers)
            mean = total / tf.cast(self.num_workers, total.dtype)
            pieces = tf.split(mean, [shape.num_elements() for shape in self.shapes])
            return {name: tf.reshape(piece, shape) for name, piece, shape in zip(self.names, pieces, self.shapes, strict=True)}


Aggregation = PSAggregation | BatchedPSAggregation


def _leaving(value: tf.Tensor, after: Sequence[tf.Operation], worker: str) -> tf.Tensor:
    """`value` as sent from `worker` once the ops `after` have run (itself when there are none).

    The wait must sit on the worker, before the transfer: TF sends a tensor as soon as it exists,
    whatever the receiving op waits for."""
    if not after:
        return value
    with tf.device(worker), tf.control_dependencies(after):
        return tf.identity(value, name="adrun_push_in_order")


def _batchable(grad: tf.Tensor | tf.IndexedSlices) -> bool:
    if isinstance(grad, tf.IndexedSlices) or not grad.shape.is_fully_defined():
        return False
    return grad.shape.num_elements() * grad.dtype.base_dtype.size < BATCH_BELOW_BYTES


# Pushes of one variable's shards on one PS task in flight at once (see `ps_aggregations`).
PUSHES_IN_FLIGHT = 2


def variable_of(name: str) -> str:
    """The variable a shard (`kernel/part_3`) belongs to; a whole variable's own name."""
    return name.rsplit("/part_", 1)[0]


def ps_aggregations(
    grads: list[tuple[str, tf.Tensor | tf.IndexedSlices, int]], num_workers: int, worker: str,
    order: Sequence[int] = (), pooled: Collection[str] = (),
) -> list[Aggregation]:
    """The accumulators of one step's synchronous PS gradients, given as (variable, gradient, PS
    task): small dense gradients batched per (PS task, dtype), every other gradient alone.

    The PS tasks of `order` (`exchange_rounds.exchange_order`) get this worker's sparse gradients
    (the rows, the all-to-all's bulk) one task after the other: what goes to a task leaves the
    worker once the previous task's sparse accumulators have taken theirs, so each host's link
    carries one push of rows at a time. Dense gradients, and tasks not in `order`, are pushed at
    once: a round costs a message back from the PS before the next leaves, which a dense shard's
    push paid without gaining (docs/performance.md, "PS transfers in staggered rounds"). So are the
    gradients named in `pooled`, whose rows are formed on their PS task from a [batch, dim] tensor
    (pooled_bags.py): what crosses is too small for rounds to pay.

    The dense shards of one variable on one PS task (PSLoadBalancing's chunks, strategies/ps.py)
    are pushed in shard order, `PUSHES_IN_FLIGHT` at a time: their gradients exist together, and
    pushed all at once they would share the link and all arrive at the end, where in order the
    first shards are applied, and can be pulled again (ps_prefetch.py), while the last still
    travel."""
    by_task: dict[int, list[tuple[str, tf.Tensor | tf.IndexedSlices]]] = defaultdict(list)
    for name, grad, ps_task in grads:
        by_task[ps_task].append((name, grad))
    aggregations: list[Aggregation] = []
    previous: list[tf.Operation] = []
    for ps_task in sorted(by_task, key=lambda t: (order.index(t) if t in order else len(order), t)):
        built = _task_aggregations(by_task[ps_task], ps_task, num_workers, worker, previous if ps_task in order else [],
                                   pooled)
        aggregations += built
        rows = [a.push for a in built if isinstance(a, PSAggregation) and a.sparse and a.name not in pooled]
        if ps_task in order and rows:
            previous = rows
    return aggregations


def _task_aggregations(
    members: list[tuple[str, tf.Tensor | tf.IndexedSlices]], ps_task: int, num_workers: int, worker: str,
    rows_after: list[tf.Operation], pooled: Collection[str],
) -> list[Aggregation]:
    """The accumulators of one PS task's gradients, the sparse ones leaving the worker after
    `rows_after` (those named in `pooled` at once: their rows are formed on the PS)."""
    aggregations: list[Aggregation] = []
    batches: dict[str, list[tuple[str, tf.Tensor]]] = defaultdict(list)
    pushed: dict[str, list[tf.Operation]] = defaultdict(list)
    for name, grad in members:
        if _batchable(grad):
            batches[grad.dtype.base_dtype.name].append((name, grad))
            continue
        if isinstance(grad, tf.IndexedSlices):
            is_pooled = name in pooled
            aggregations.append(PSAggregation(name, grad, ps_task, num_workers, worker, [] if is_pooled else rows_after,
                                              is_pooled))
            continue
        earlier = pushed[variable_of(name)]
        in_flight = [earlier[-PUSHES_IN_FLIGHT]] if len(earlier) >= PUSHES_IN_FLIGHT else []
        aggregation = PSAggregation(name, grad, ps_task, num_workers, worker, in_flight)
        earlier.append(aggregation.push)
        aggregations.append(aggregation)
    for _, batch in sorted(batches.items()):
        batch.sort(key=lambda member: member[0])  # one layout on every worker
        if len(batch) == 1:
            aggregations.append(PSAggregation(*batch[0], ps_task, num_workers, worker))
        else:
            aggregations.append(BatchedPSAggregation(batch, ps_task, num_workers, worker))
    return aggregations


def _token_queue(name: str, capacity: int) -> tf.queue.FIFOQueue:
    with tf.device(ps_device(0)):
        return tf.queue.FIFOQueue(capacity, tf.int64, shapes=[[]], shared_name=name, name="adrun_tokens")


def _token() -> tf.Tensor:
    return tf.constant(0, tf.int64)


class StepTokens:
    """Token queues on PS 0 that order one synchronous step between the chief and the others.

    Each non-chief worker has its own release queue, so a fast worker can never take a slow
    worker's token and start a second step early. Used only in steps without collectives: see
    `step_order.CollectiveStepOrder` for why a collective step must not wait on a PS queue.
    """

    def __init__(self, call_index: int, num_workers: int) -> None:
        self.num_workers = num_workers
        self.prefix = f"adrun/step_tokens/{call_index}"

    def _release_queue(self, worker: int) -> tf.queue.FIFOQueue:
        return _token_queue(f"{self.prefix}/release/w{worker}", 2)

    def _done_queue(self) -> tf.queue.FIFOQueue:
        return _token_queue(f"{self.prefix}/done", 2 * self.num_workers)

    def own_updates_applied(self, worker: int, own_updates: list[tf.Operation]) -> tf.Operation:
        """Chief: waits until every other worker reported its own updates of the step applied.
        Non-chief: reports its own updates applied."""
        if worker == 0:
            return self._done_queue().dequeue_many(self.num_workers - 1).op
        with tf.control_dependencies(own_updates):
            return self._done_queue().enqueue(_token(), name=f"adrun_done_w{worker}")

    def end_step(self, worker: int, after: list[tf.Operation]) -> tf.Operation:
        """Chief: once `after` (the step) has run, gives every other worker one token.
        Non-chief: once `after` (pushes, own updates) has run, waits for this worker's token."""
        with tf.control_dependencies(after):
            if worker == 0:
                waits = [self._release_queue(w).enqueue(_token()) for w in range(1, self.num_workers)]
            else:
                waits = [self._release_queue(worker).dequeue()]
        return tf.group(*waits, name="adrun_sync_step")


class StalenessBarrier:
    """Bounded staleness: no worker finishes step k before every other worker finished step k - s.

    One queue per ordered pair (w, u) starts with s tokens; after each step u puts one token into
    every (w, u) queue and w takes one from each of its (w, u) queues. So w's step count never
    exceeds u's by more than s, for every pair.
    """

    def __init__(self, call_index: int, num_workers: int, bound: int) -> None:
        self.num_workers = num_workers
        self.bound = bound
        self.prefix = f"adrun/staleness/{call_index}"

    def _queue(self, waiter: int, producer: int) -> tf.queue.FIFOQueue:
        return _token_queue(f"{self.prefix}/w{waiter}_from_w{producer}", 2 * self.bound + 2)

    def initial_tokens(self) -> tf.Operation:
        """Chief, once before training: the s tokens of slack in every pair queue.

        Built outside the caller's control dependencies: a script may wrap `minimize` in its own,
        which must not run at set-up time."""
        with tf.control_dependencies(None):
            fills = [
                self._queue(w, u).enqueue_many(tf.zeros([self.bound], tf.int64))
                for w in range(self.num_workers) for u in range(self.num_workers) if w != u
            ]
            return tf.group(*fills, name="adrun_staleness_init")

    def after_step(self, worker: int, step: tf.Operation) -> tf.Operation:
        others = [u for u in range(self.num_workers) if u != worker]
        with tf.control_dependencies([step]):
            produced = [self._queue(u, worker).enqueue(_token()) for u in others]
        with tf.control_dependencies(produced):
            taken = [self._queue(worker, u).dequeue() for u in others]
        return tf.group(*taken, name="adrun_bounded_step")
