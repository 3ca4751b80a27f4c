"""PowerSGD's mean of several matrices in one pair of collectives (adrun/runtime/kernels/compression.py):
each matrix keeps its own power iteration, warm start and error feedback, as if reduced alone."""

from __future__ import annotations

import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorflow as tf

from adrun.runtime.kernels.compression import powersgd_means

SHAPES = {"a": ((6, 5), 2), "b": ((4, 3, 2), 1)}  # name: (shape, rank); b is a 4x6 matrix
WORKERS, STEPS = 2, 3
TIMEOUT_S = 60


def _reference(grads: dict[str, list[list[np.ndarray]]]) -> dict[str, list[np.ndarray]]:
    """Each matrix alone, step by step: rank-r PowerSGD (Vogels et al., 2019) with each worker's error feedback."""
    out: dict[str, list[np.ndarray]] = {}
    for name, ((n, *rest), rank) in SHAPES.items():
        m = int(np.prod(rest))
        seed = [zlib.crc32(name.encode()) & 0x7FFFFFFF, 0]
        q = tf.random.stateless_normal([m, rank], seed, dtype=tf.float64).numpy()
        errors = [np.zeros((n, m)) for _ in range(WORKERS)]
        out[name] = []
        for step in grads[name]:
            matrices = [g.reshape(n, m) + e for g, e in zip(step, errors, strict=True)]
            p, _ = np.linalg.qr(np.mean([a @ q for a in matrices], axis=0))
            local_qs = [a.T @ p for a in matrices]
            q = np.mean(local_qs, axis=0)
            errors = [a - p @ lq.T for a, lq in zip(matrices, local_qs, strict=True)]
            out[name].append((p @ q.T).reshape(n, *rest))
    return out


class Group:
    """A collective of WORKERS threads: each hands its tensor and gets the mean of all of them."""

    def __init__(self) -> None:
        self._barrier = threading.Barrier(WORKERS, timeout=TIMEOUT_S)
        self._inputs: dict[int, tf.Tensor] = {}
        self.labels: list[str] = []

    def mean(self, worker: int, t: tf.Tensor, label: str) -> tf.Tensor:
        self._inputs[worker] = t
        if worker == 0:
            self.labels.append(label)
        self._barrier.wait()
        mean = tf.add_n([self._inputs[w] for w in range(WORKERS)]) / WORKERS
        self._barrier.wait()  # every worker has read the inputs before the next collective writes them
        return mean


def test_matrices_reduced_together_each_get_their_own_powersgd_mean() -> None:
    rng = np.random.default_rng(1)
    grads = {name: [[rng.normal(size=shape) for _ in range(WORKERS)] for _ in range(STEPS)]
             for name, (shape, _) in SHAPES.items()}
    group = Group()

    def worker(w: int) -> list[list[np.ndarray]]:
        state: dict[str, tf.Variable] = {}

        def variable(initial, name: str) -> tf.Variable:
            if name not in state:
                state[name] = tf.Variable(initial())
            return state[name]

        means = []
        for step in range(STEPS):
            named = [(name, tf.constant(grads[name][step][w]), rank) for name, (_, rank) in SHAPES.items()]
            found = powersgd_means(named, lambda t, label: group.mean(w, t, label), "g", variable)
            means.append([m.numpy() for m in found])
        return means

    with ThreadPoolExecutor(WORKERS) as pool:
        per_worker = [f.result(timeout=TIMEOUT_S) for f in [pool.submit(worker, w) for w in range(WORKERS)]]
    assert group.labels == ["g/p", "g/q"] * STEPS  # one collective for every P, one for every Q
    expected = _reference(grads)
    for step in range(STEPS):
        for i, name in enumerate(SHAPES):
            np.testing.assert_array_equal(per_worker[0][step][i], per_worker[1][step][i])
            np.testing.assert_allclose(per_worker[0][step][i], expected[name][step], rtol=1e-9, atol=1e-12)



@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16], ids=lambda d: d.name)
def test_a_half_precision_gradient_is_factored_in_float32_and_keeps_its_dtype(dtype: tf.DType) -> None:
    """tf.linalg.qr has no bfloat16 or float16 kernel (a bfloat16 graph failed at build): the
    factor maths runs in float32, the result, the state and the factors on the wire keep the
    gradient's dtype. One worker (the mean is the identity): the first step's approximation is
    P Pᵀ A, P an orthonormal basis of A Q, here within the half type's rounding of numpy's."""
    value = np.random.default_rng(2).normal(size=(6, 5))
    wire: list[tf.DType] = []
    made: list[tf.Variable] = []

    def variable(initial, name: str) -> tf.Variable:
        made.append(tf.compat.v1.Variable(initial(), name=name, use_resource=True))
        return made[-1]

    def identity(t: tf.Tensor, label: str) -> tf.Tensor:
        wire.append(t.dtype)
        return t

    graph = tf.Graph()
    with graph.as_default():
        [mean] = powersgd_means([("w", tf.constant(value, dtype), 2)], identity, "g", variable)
        with tf.compat.v1.Session() as sess:
            sess.run([v.initializer for v in made])
            found = sess.run(tf.cast(mean, tf.float64))
    assert mean.dtype == dtype and wire == [dtype, dtype] and {v.dtype.base_dtype for v in made} == {dtype}
    a = tf.cast(tf.cast(value, dtype), tf.float64).numpy()
    seed = [zlib.crc32(b"w") & 0x7FFFFFFF, 0]
    q = tf.cast(tf.random.stateless_normal([5, 2], seed, dtype=dtype), tf.float64).numpy()
    p, _ = np.linalg.qr(a @ q)
    np.testing.assert_allclose(found, p @ p.T @ a, atol=0.05 * np.abs(a).max())
