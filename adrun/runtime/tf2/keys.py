"""Instance keys and ordering tokens of a TF2 worker's collectives.

Collectives of different workers pair up by (group key, instance key), and a worker that is not the
group leader asks the leader to resolve every instance key it has not used before (TF's
CollectiveParamResolverDistributed: one `CompleteInstance` RPC, before the collective can start);
a key it has used is resolved from its cache. So a step's collectives take the same keys every
step, as graph mode's do, named by what they reduce: a key is a hash of the collective's label (the
plan group and variable names, kernels/allreduce_sync.py) and of its shape, the same on every worker
whenever and however often each traced its step; a label met twice in one traced function is
numbered. The shape is in the key because the cache holds an instance's shape and refuses another:
the padded rows of a sparse gather change shape from step to step, and each shape is resolved once.

TF chains collectives of one function in program order, unless each takes a resource (the
ordering token). On the host each label has its own token, so the step's collectives run at once
where their data allows, as graph mode's do (their keys do not depend on the order they run in). A
collective on another device (routes.py: NCCL on a GPU) shares one token per device, as
MultiWorkerMirroredStrategy does: NCCL needs every device to launch them in the same order.
The placer puts a collective with its token, so a token lives on its collective's device.

Variables are broadcast eagerly, in creation order, under keys counted in Python from 1; step keys
lie above them.
"""

from __future__ import annotations

import weakref
import zlib
from collections import Counter

import tensorflow as tf

STEP_KEYS_START = 1 << 24  # broadcasts of initial values below, step collectives from here
_STEP_KEYS = (1 << 31) - 1 - STEP_KEYS_START  # how many int32 keys lie above the broadcasts'
_SHAPE_PRIMES = (7919, 104729, 1299709, 15485863)  # a run-time dimension's weight in its key


class StepKeys:
    """A step collective's instance key is a hash of its label and shape (the same on every worker
    however it traced); its ordering token, a variable, is made at the first collective (not at
    start-up, where a token variable would start TF's context before the script's own tf.config
    settings), eagerly."""

    def __init__(self, host_device: str) -> None:
        self._host_device = host_device
        self._tokens: dict[str, tf.Variable] = {}  # host label or other device -> its ordering token
        self._labels: dict[int, str] = {}  # fixed key -> its label: two labels on one key are refused
        self._met: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> labels traced in it

    def label(self, label: str) -> str:
        """`label`, numbered from its second use in the graph being traced (two collectives of one
        label in one function may run at once, so they need keys of their own). Eager collectives run
        one after the other and keep their label."""
        if tf.executing_eagerly():
            return label
        met = self._met.setdefault(tf.compat.v1.get_default_graph(), Counter())
        met[label] += 1
        return label if met[label] == 1 else f"{label}#{met[label]}"

    def instance_key(self, label: str, t: tf.Tensor) -> int | tf.Tensor:
        """The key of the collective of `label` (from `label()`) on `t`, a hash of both: a number
        when `t`'s shape is known now (always, eagerly), else computed from its run-time shape the
        same way, so a worker that traced a shape as known and one that traced it as unknown agree."""
        base = zlib.crc32(label.encode()) % _STEP_KEYS
        if t.shape.is_fully_defined():
            weighted = sum(d * _SHAPE_PRIMES[i % len(_SHAPE_PRIMES)] for i, d in enumerate(t.shape.as_list()))
            key = STEP_KEYS_START + (base + weighted) % _STEP_KEYS
            other = self._labels.setdefault(key, label)
            if other != label:
                raise RuntimeError(f"adrun: collectives '{other}' and '{label}' hash to one instance key {key}; "
                                   "rename one of the variables")
            return key
        dims = tf.shape(t, out_type=tf.int64)
        weights = tf.gather(tf.constant(_SHAPE_PRIMES, tf.int64), tf.range(tf.size(dims)) % len(_SHAPE_PRIMES))
        return tf.cast(STEP_KEYS_START + (base + tf.reduce_sum(dims * weights)) % _STEP_KEYS, tf.int32)

    def ordering_token(self, device: str, label: str) -> list[tf.Tensor]:
        """The ordering token of the collective of `label` on `device` (a full device name)."""
        name = label if device == self._host_device else device
        token = self._tokens.get(name)
        if token is None:
            from adrun.runtime.tf2.broadcast import internal

            with tf.init_scope(), internal(), tf.device(device):
                token = self._tokens[name] = tf.Variable(0.0, trainable=False, name="adrun_ordering_token")
        return [token.handle]


class CreationKeys:
    """Keys of the eager broadcasts of initial values: every worker creates the same variables in
    the same order."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        self._last += 1
        if self._last >= STEP_KEYS_START:
            raise RuntimeError(f"adrun: more than {STEP_KEYS_START - 1} variables were created")
        return self._last
