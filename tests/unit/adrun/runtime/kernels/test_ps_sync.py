"""Small dense gradients bound for one PS task share one accumulator (`ps_sync.ps_aggregations`),
and the batched mean is bit for bit the mean of per-variable accumulators."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.kernels import ps_sync  # noqa: E402
from adrun.runtime.kernels.ps_sync import BATCH_BELOW_BYTES, BatchedPSAggregation, PSAggregation, ps_aggregations  # noqa: E402

WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
LOCAL = "/job:localhost/replica:0/task:0/device:CPU:0"  # a plain session's only device
LARGE_ROWS = BATCH_BELOW_BYTES // (4 * 8) + 1  # a float32 [rows, 8] gradient just above the bound


def _gradients():
    return [
        ("small_a", tf1.placeholder(tf.float32, [3, 4]), 0),
        ("large", tf1.placeholder(tf.float32, [LARGE_ROWS, 8]), 0),
        ("small_b", tf1.placeholder(tf.float32, [5]), 0),
        ("small_other_task", tf1.placeholder(tf.float32, [2, 2]), 1),
        ("small_f64", tf1.placeholder(tf.float64, [2]), 0),
        ("sparse", tf.IndexedSlices(tf1.placeholder(tf.float32, [None, 4]), tf1.placeholder(tf.int64, [None]),
                                    tf.constant([10, 4], tf.int64)), 0),
    ]


def test_small_dense_gradients_share_one_accumulator_per_ps_task_and_dtype():
    with tf.Graph().as_default():
        aggregations = ps_aggregations(_gradients(), 2, WORKER)
    batched = [sorted(a.names) for a in aggregations if isinstance(a, BatchedPSAggregation)]
    alone = sorted(a.name for a in aggregations if isinstance(a, PSAggregation))
    assert batched == [["small_a", "small_b"]]
    # too large, alone on its task, another dtype, sparse
    assert alone == ["large", "small_f64", "small_other_task", "sparse"]


def _means(members, batched: bool, feeds: list[dict]) -> dict[str, np.ndarray]:
    """Two workers' pushes into fresh accumulators, then the chief's take, in one local session."""
    with tf.Graph().as_default() as graph:
        grads = [(name, tf1.placeholder(tf.float32, shape), 0) for name, shape in members]
        if batched:
            aggregations = [BatchedPSAggregation([(n, g) for n, g, _ in grads], 0, 2, LOCAL)]
        else:
            aggregations = [PSAggregation(n, g, 0, 2, LOCAL) for n, g, _ in grads]
        means: dict = {}
        for a in aggregations:
            means.update(a.take_means())
        with tf1.Session(graph=graph) as sess:
            sess.run([a.push for a in aggregations], {g: feeds[0][n] for n, g, _ in grads})
            return sess.run(means, {g: feeds[1][n] for n, g, _ in grads})


def test_the_batched_mean_equals_the_per_variable_means_exactly(monkeypatch):
    monkeypatch.setattr(ps_sync, "ps_device", lambda task: LOCAL)  # the PS's ops in the local session
    members = [("b", (7,)), ("a", (3, 5)), ("c", (2, 2, 2))]
    rng = np.random.default_rng(0)
    feeds = [{n: (rng.normal(size=s) * 10.0 ** rng.integers(-3, 4)).astype(np.float32) for n, s in members}
             for _ in range(2)]
    batched, alone = _means(members, True, feeds), _means(members, False, feeds)
    for name, shape in members:
        assert batched[name].shape == shape
        np.testing.assert_array_equal(batched[name], alone[name])
        np.testing.assert_array_equal(batched[name], (feeds[0][name] + feeds[1][name]) / np.float32(2))


def test_shards_of_one_variable_on_one_task_are_pushed_in_order_two_at_a_time():
    with tf.Graph().as_default():
        shards = [(f"k/part_{i}", tf1.placeholder(tf.float32, [LARGE_ROWS, 8]), 0) for i in range(4)]
        other = [("other", tf1.placeholder(tf.float32, [LARGE_ROWS, 8]), 0)]
        aggregations = ps_aggregations(shards + other, 2, WORKER)
    pushes = {a.name: a.push for a in aggregations}

    def waits_for(name: str) -> set[str]:
        """The pushes whose completion the gradient pushed by `name` waits for."""
        sent = pushes[name].inputs[-1].op  # apply_grad(handle, local_step, gradient): the gradient
        return {op.name for op in sent.control_inputs}

    assert waits_for("k/part_0") == waits_for("k/part_1") == set()
    assert waits_for("k/part_2") == {pushes["k/part_0"].name}
    assert waits_for("k/part_3") == {pushes["k/part_1"].name}
    assert waits_for("other") == set()  # another variable: pushed as soon as it exists
