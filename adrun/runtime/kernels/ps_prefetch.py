"""Prefetching synchronous PS variables: a worker pulls a variable's next value as soon as the
chief has applied it, not at the start of the next step.

Without it a synchronous PS step is pull, compute, push, apply, in sequence: when one large
variable lives on a PS of another host, its pull uses one direction of the link and its push the
other, one after the other (docs/performance.md, "Parameter servers at equal bytes"). PS and
PSLoadBalancing cut such a variable into chunks kept together on its one PS (strategies/ps.py);
for each chunk (each dense shard that shares its PS task with another shard of its variable),
every worker keeps a cache on its own device:

- the step's forward reads of the variable read the cache;
- once the chief has applied the variable's update it puts one token per other worker into the
  variable's queue on its PS; a worker takes its token there and pulls the new value into the
  cache, inside the same step. The pulls of a chunked variable's first chunks therefore flow
  (PS -> worker) while its last chunks are still being pushed (worker -> PS).

Exactness does not rest on the schedule: before the first cached read of a step (or of any run),
the PS compares the variable bit for bit with a shadow of what it last sent this worker, and
sends the whole variable again when they differ (a restore, an assign by the script, a worker
that restarted, the first step). Cache and shadow start as zeros and are written together from
one read of the variable, so equal bits on the PS mean the cache holds the variable. The cost is
one shadow per worker and variable on the PS, and a compare per step on the PS.
"""

from __future__ import annotations

from collections import Counter

import tensorflow as tf

from adrun.runtime.kernels.proxy import forward_readers
from adrun.runtime.kernels.ps_sync import variable_of

_SAME_BITS = {2: tf.int16, 4: tf.int32, 8: tf.int64}


def _bits(value: tf.Tensor) -> tf.Tensor:
    """`value` as integers of the same width: a bitwise compare (NaN equals itself, -0 is not 0)."""
    width = value.dtype.size
    if value.dtype.is_integer or value.dtype == tf.bool:
        return value
    return tf.bitcast(value, _SAME_BITS[width])


def prefetchable(var: tf.Variable, grad: object) -> bool:
    """Whether `var` (a synchronous PS variable with gradient `grad`) can get a cache: dense, a
    resource variable of known shape (at least one axis) read whole by the forward pass."""
    if isinstance(grad, tf.IndexedSlices) or var.op.type != "VarHandleOp" or not var.shape.is_fully_defined():
        return False
    if var.shape.rank == 0:
        return False
    if var.dtype.base_dtype.size not in _SAME_BITS:
        return False
    readers = forward_readers(var)
    return bool(readers) and all(op.type == "ReadVariableOp" for op in readers)


class PrefetchedVariable:
    """One variable's cache on this worker, its shadow on the PS, and its token queue."""

    def __init__(self, var: tf.Variable, name: str, ps_device: str, worker_device: str, worker: int, num_workers: int) -> None:
        self.var = var
        self.name = name
        self.ps_device = ps_device
        self.worker_device = worker_device
        self.worker = worker
        self.num_workers = num_workers
        dtype = var.dtype.base_dtype
        self._handle = var.op.outputs[0]
        self._dtype = dtype
        with tf.control_dependencies(None), tf.name_scope(f"adrun_prefetch/{name}"):
            zeros = tf.zeros(var.shape, dtype)
            with tf.device(worker_device):
                self._cache = tf.compat.v1.Variable(zeros, trainable=False, collections=[], use_resource=True, name="cache")
            with tf.device(ps_device):
                self._shadow = tf.compat.v1.Variable(
                    zeros, trainable=False, collections=[], use_resource=True, name=f"shadow_w{worker}"
                )
            self.initializers = [self._cache.initializer, self._shadow.initializer]
        self._readers = forward_readers(var)
        self._redirect()

    def _read_ps(self) -> tf.Tensor:
        with tf.device(self.ps_device):
            return tf.raw_ops.ReadVariableOp(resource=self._handle, dtype=self._dtype)

    def _redirect(self) -> None:
        """Forward reads read the cache, after the PS has checked it (and resent what changed)."""
        with tf.control_dependencies(None), tf.name_scope(f"adrun_prefetch/{self.name}/check"):
            current = self._read_ps()
            with tf.device(self.ps_device):
                same = tf.reduce_all(tf.equal(_bits(current), _bits(self._shadow.read_value())))
                rows = tf.shape(current)[0] * (1 - tf.cast(same, tf.int32))
                # what the check sends: no row, or all of them
                self.resent = current[:rows]
                self._checked_shadow = self._overwrite(self._shadow, self.resent)
            with tf.device(self.worker_device):
                check = tf.group(self._overwrite(self._cache, self.resent), self._checked_shadow)
        for op in self._readers:
            op._update_input(0, self._cache.handle)
            op._add_control_input(check)
            if "_class" in op.node_def.attr:
                op._clear_attr("_class")  # TF colocated the read with the PS variable; it now reads the cache

    @staticmethod
    def _overwrite(variable: tf.Variable, rows: tf.Tensor) -> tf.Operation:
        """Write `rows` over the first rows of `variable` in place: nothing when there are none."""
        return tf.raw_ops.ResourceStridedSliceAssign(
            ref=variable.handle, begin=[0], end=tf.shape(rows)[:1], strides=[1], value=rows
        )

    def _queue(self, worker: int) -> tf.queue.FIFOQueue:
        with tf.device(self.ps_device):
            return tf.queue.FIFOQueue(
                2, tf.int64, shapes=[[]], shared_name=f"adrun/prefetch/{self.name}/w{worker}", name="adrun_prefetch_tokens"
            )

    def _pull(self, after: list[tf.Operation]) -> tf.Operation:
        """Read the applied value on the PS into the shadow and the cache, once `after` has run and
        this step's forward reads are done.

        The shadow is written after the step's check has written it (a PS-local wait, so no new
        transfer): a check run beside the pull (a graph whose update does not follow the forward
        pass) could otherwise read the variable before the update, the shadow after the pull, and
        write the old value over the pulled shadow; the next check would then resend it all."""
        with tf.control_dependencies(after):
            current = self._read_ps()
        with tf.device(self.ps_device), tf.control_dependencies([self._checked_shadow]):
            shadowed = self._shadow.assign(current, read_value=False)
        with tf.device(self.worker_device), tf.control_dependencies(self._readers):
            cached = self._cache.assign(current, read_value=False)
        return tf.group(cached, shadowed, name=f"adrun_prefetch_{self.name.replace('/', '_')}")

    def chief_after_update(self, update: list[tf.Operation]) -> list[tf.Operation]:
        """Chief: once the variable's update ran, release every other worker's pull and pull its own."""
        with tf.control_dependencies(update):
            releases = [self._queue(w).enqueue(tf.constant(0, tf.int64)) for w in range(1, self.num_workers)]
        return [*releases, self._pull(update)]

    def worker_pull(self) -> tf.Operation:
        """Non-chief: wait on the PS for the chief's release, then pull the new value."""
        with tf.device(self.ps_device):
            released = self._queue(self.worker).dequeue()
        return self._pull([released.op])


def chunks(variables: list[tuple[str, tf.Variable, int]]) -> list[tuple[str, tf.Variable, int]]:
    """Of (name, variable, PS task), the shards that share their PS task with another shard of
    their variable (`kernel/part_0`, `kernel/part_1` on one task): the ones a worker gains by
    pulling while other shards are still pushed."""
    count = Counter((task, variable_of(name)) for name, _, task in variables if "/part_" in name)
    return [item for item in variables if "/part_" in item[0] and count[(item[2], variable_of(item[0]))] > 1]
