"""The benchmark's all-reduce algorithms average exactly, and its summary takes the slowest worker."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bench.collective_algorithms import BUILDERS, _summary

WORKERS = 4
SIZE = 1_003  # not a multiple of the group: the all-to-all slices are padded and unpadded


@pytest.mark.parametrize("algorithm", sorted(BUILDERS))
def test_each_algorithm_is_the_mean_over_the_workers(algorithm):
    """Four CPU devices of one process stand for the four hosts; each builds the algorithm on its
    own tensor, and every device must end with the element-wise mean of the four."""
    inputs = [np.random.default_rng(i).normal(size=SIZE).astype(np.float32) for i in range(WORKERS)]
    with tf.Graph().as_default():
        outputs = []
        for i, values in enumerate(inputs):
            with tf.device(f"/device:CPU:{i}"):
                outputs.append(BUILDERS[algorithm](tf, tf.constant(values) + 0.0, WORKERS, 100))
        config = tf.compat.v1.ConfigProto(device_count={"CPU": WORKERS})
        with tf.compat.v1.Session(config=config) as sess:
            got = sess.run(outputs)
    for out in got:
        np.testing.assert_allclose(out, np.mean(inputs, axis=0), rtol=1e-5, atol=1e-6)


def test_summary_takes_each_iterations_slowest_worker_and_compares_with_the_ring():
    rows = [{"iteration": it, "case": case, "worker": w, "ms": ms + w, "drops": (3 if w == 0 else None)}
            for it in range(3) for case, ms in (("ring", 100.0), ("a2a_a2a", 50.0)) for w in range(WORKERS)]
    by_case = {s["case"]: s for s in _summary(rows)}
    assert by_case["ring"]["median_ms"] == 103.0
    assert by_case["a2a_a2a"]["median_ms"] == 53.0
    assert by_case["a2a_a2a"]["vs_ring"] == round(103 / 53, 3)
    assert by_case["ring"]["drops_total"] == 9
