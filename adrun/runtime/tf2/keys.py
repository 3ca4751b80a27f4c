"""Instance keys of a TF2 worker's collectives.

Collectives of different workers pair up by (group key, instance key). MultiWorkerMirroredStrategy
feeds each call a fresh key through a captured call-time value, which fails inside Keras's
`steps_per_execution` loop (the capture is re-bound in a cond branch nobody feeds). Here a key is
made at run time by a counter variable (`assign_add(1)`), correct whatever each worker traced and
inside conds and loops, as long as every worker runs the same sequence of collectives; its handle
is the one ordering token of every collective, so TF runs them in program order.

Variables are broadcast eagerly, in creation order, under keys counted in Python from 1; the
run-time counter starts above them.
"""

from __future__ import annotations

import tensorflow as tf

RUNTIME_KEYS_START = 1 << 24  # broadcasts of initial values below, run-time collectives above


class RuntimeKeys:
    """The counter is made at the first collective (not at start-up, where it would start TF's
    context before the script's own tf.config settings), eagerly and outside the broadcast."""

    def __init__(self) -> None:
        self._variable: tf.Variable | None = None

    def _counter(self) -> tf.Variable:
        if self._variable is None:
            from adrun.runtime.tf2.broadcast import internal

            with tf.init_scope(), internal():
                self._variable = tf.Variable(RUNTIME_KEYS_START, dtype=tf.int32, trainable=False,
                                             name="adrun_instance_key")
        return self._variable

    def next(self) -> tf.Tensor:
        """A fresh instance key, made when the collective runs."""
        return tf.identity(self._counter().assign_add(1))

    @property
    def ordering_token(self) -> list[tf.Tensor]:
        return [self._counter().handle]


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
