"""Every worker starts from worker 0's values: a variable creator that broadcasts initial values.

Entered at `import tensorflow`, before the script makes a variable. Each variable the script's thread
creates (model weights, optimizer slots, the loss scale, Keras's seed state) gets worker 0's initial
value. The initializer is evaluated and broadcast eagerly under `tf.init_scope()`: Keras creates
optimizer slots during the first trace of the training function, and a broadcast put into such a
variable's initial value would be lifted into a separate initializer function, away from its key.
Each broadcast runs on the device and in the group routes.py gives its dtype (NCCL on GPUs).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from adrun.runtime.tf2.keys import CreationKeys
from adrun.runtime.tf2.routes import Routes

_local = threading.local()
# what CollectiveBcastSend/RecvV2 carry; other dtypes travel as one of these and are cast back
_CARRIED = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)


@contextlib.contextmanager
def internal() -> Iterator[None]:
    """Variables adrun makes for itself (instance keys, compressor state): each worker's own."""
    _local.internal = getattr(_local, "internal", 0) + 1
    try:
        yield
    finally:
        _local.internal -= 1


def is_internal() -> bool:
    """Whether the variable being created is adrun's own (under `internal()`)."""
    return bool(getattr(_local, "internal", 0))


def _carrier(dtype: tf.DType) -> tf.DType | None:
    if dtype in _CARRIED:
        return dtype
    if dtype.is_integer or dtype == tf.bool:
        return tf.int64
    return None  # strings, resources: left as each worker made them


class Broadcaster:
    """The variable creator of a run with several workers."""

    def __init__(self, task_index: int, num_workers: int, timeout_s: float, routes: Callable[[], Routes]) -> None:
        self._sender = task_index == 0
        self._num_workers = num_workers
        self._timeout_s = timeout_s
        self._routes = routes
        self._keys = CreationKeys()

    def __call__(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        if is_internal():
            return next_creator(**kwargs)
        initial = kwargs.get("initial_value")
        with tf.init_scope():
            value = initial() if callable(initial) else initial
            dtype = kwargs.get("dtype")
            value = tf.convert_to_tensor(value, dtype=dtype if not isinstance(value, tf.Tensor) else None)
            kwargs["initial_value"] = self.broadcast(value)
        return next_creator(**kwargs)

    def broadcast(self, value: tf.Tensor) -> tf.Tensor:
        """Worker 0's `value` on every worker (eager)."""
        carrier = _carrier(value.dtype)
        if carrier is None:
            return value
        sent = tf.cast(value, carrier)
        key = self._keys.next()
        routes = self._routes()
        route = routes.of(carrier.name)
        with tf.device(routes.device(route)):
            if self._sender:
                tf.raw_ops.CollectiveBcastSendV2(
                    input=sent, group_size=self._num_workers, group_key=route.group_key, instance_key=key,
                    communication_hint=route.communication_hint, timeout_seconds=self._timeout_s,
                )
                received = sent
            else:
                received = tf.raw_ops.CollectiveBcastRecvV2(
                    group_size=self._num_workers, group_key=route.group_key, instance_key=key, shape=tf.shape(sent),
                    T=carrier, communication_hint=route.communication_hint, timeout_seconds=self._timeout_s,
                )
        return tf.cast(received, value.dtype)
