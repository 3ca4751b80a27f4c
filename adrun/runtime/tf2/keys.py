"""Instance keys of a TF2 worker's collectives.

Collectives of different workers pair up by (group key, instance key). MultiWorkerMirroredStrategy
feeds each call a fresh key through a captured call-time value, which fails inside Keras's
`steps_per_execution` loop (the capture is re-bound in a cond branch nobody feeds). Here a key is
made at run time by a counter variable (`assign_add(1)`), correct whatever each worker traced and
inside conds and loops, as long as every worker runs the same sequence of collectives; its handle
is the ordering token of every collective on the worker's CPU, so TF runs them in program order.

A collective is placed with its ordering token (TF's placer colocates an op with the resources it
takes; seen: a reduce meant for a second device ran on CPU:0, with the counter, and joined the
wrong group), so a collective on another device (routes.py: the GPU) gets a token of that device,
one per device as MultiWorkerMirroredStrategy has: the collectives of each device run in program
order, which NCCL needs, and each still takes its key from the one counter.

Variables are broadcast eagerly, in creation order, under keys counted in Python from 1; the
run-time counter starts above them.
"""

from __future__ import annotations

import tensorflow as tf

RUNTIME_KEYS_START = 1 << 24  # broadcasts of initial values below, run-time collectives above


class RuntimeKeys:
    """The counter is made at the first collective (not at start-up, where it would start TF's
    context before the script's own tf.config settings), eagerly, outside the broadcast, on the
    worker's CPU (`host_device`: a key is read on the host, whichever device runs the collective)."""

    def __init__(self, host_device: str) -> None:
        self._host_device = host_device
        self._variable: tf.Variable | None = None
        self._tokens: dict[str, tf.Variable] = {}  # device -> the ordering token of its collectives

    def _counter(self) -> tf.Variable:
        if self._variable is None:
            from adrun.runtime.tf2.broadcast import internal

            with tf.init_scope(), internal(), tf.device(self._host_device):
                self._variable = tf.Variable(RUNTIME_KEYS_START, dtype=tf.int32, trainable=False,
                                             name="adrun_instance_key")
        return self._variable

    def next(self) -> tf.Tensor:
        """A fresh instance key, made when the collective runs."""
        return tf.identity(self._counter().assign_add(1))

    def ordering_token(self, device: str) -> list[tf.Tensor]:
        """The ordering token of the collectives that run on `device` (a full device name)."""
        if device == self._host_device:
            return [self._counter().handle]
        token = self._tokens.get(device)
        if token is None:
            from adrun.runtime.tf2.broadcast import internal

            with tf.init_scope(), internal(), tf.device(device):
                token = self._tokens[device] = tf.Variable(0.0, trainable=False, name="adrun_ordering_token")
        return [token.handle]


class CreationKeys:
    """Keys of the eager broadcasts of initial values: every worker creates the same variables in
    the same order."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        self._last += 1
        if self._last >= RUNTIME_KEYS_START:
            raise RuntimeError(f"adrun: more than {RUNTIME_KEYS_START - 1} variables were created")
        return self._last
