"""The pooled-lookup benchmark's two steps are plain SGD on the embed model; its summaries read right."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bench.pooled_lookup import Model, build_step, head_initial_values, parse_net_dev, summarize

tf1 = tf.compat.v1
SMALL = Model(vocab=1000, dim=4, bag=5, hidden=8, batch=6, lr=0.5)
SHARDS = ["/cpu:0"] * 4


def _reference_step(ids: np.ndarray, labels: np.ndarray, table: np.ndarray, model: Model) -> tuple[np.ndarray, list[np.ndarray]]:
    """One step of TF's own embedding_lookup + reduce_mean + GradientDescentOptimizer on one whole table."""
    with tf.Graph().as_default(), tf1.Session() as sess:
        emb = tf.Variable(table)
        head = [tf.Variable(v) for v in head_initial_values(model)]
        pooled = tf.reduce_mean(tf.nn.embedding_lookup(emb, ids), axis=1)
        k1, b1, k2, b2, k3, b3 = head
        x = tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(pooled, k1) + b1), k2) + b2)
        logit = tf.squeeze(tf.matmul(x, k3) + b3, axis=1)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
        train = tf1.train.GradientDescentOptimizer(model.lr).minimize(loss)
        sess.run(tf1.global_variables_initializer())
        sess.run(train)
        return sess.run(emb), sess.run(head)


@pytest.mark.parametrize("variant", ["rows", "pooled", "rows+pshead", "pooled+pshead"])
def test_one_step_equals_tensorflow_sgd_on_the_whole_table(variant):
    rng = np.random.default_rng(3)
    ids = rng.integers(0, SMALL.vocab, (SMALL.batch, SMALL.bag))
    ids[0, :3] = ids[1, 0] = 7  # repeated ids within and across bags: their gradients add up
    ids[2, 0] = 999  # the last shard's last row
    labels = (ids.sum(axis=1) % 2).astype(np.float32)
    with tf.Graph().as_default(), tf1.Session() as sess:
        step = build_step(tf, variant, tf.constant(ids), tf.constant(labels), SMALL, SHARDS, "/cpu:0", 1, None)
        sess.run(tf1.global_variables_initializer())
        initial = np.concatenate(sess.run(step.tables))
        sess.run(step.train)
        table, head = np.concatenate(sess.run(step.tables)), sess.run(step.head)
        if variant.endswith("+pshead"):
            assert len(step.shared_variables) > len(step.tables) + len(head)  # the head is cut over the PS tasks
    want_table, want_head = _reference_step(ids, labels, initial, SMALL)
    assert np.abs(table - initial).max() > 1e-4  # the step trained the rows it touched
    np.testing.assert_allclose(table, want_table, atol=1e-6)
    for got, want in zip(head, want_head, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_both_variants_start_from_equal_tables():
    with tf.Graph().as_default(), tf1.Session() as sess:
        ids, labels = tf.zeros([SMALL.batch, SMALL.bag], tf.int64), tf.zeros([SMALL.batch])
        a = build_step(tf, "rows", ids, labels, SMALL, SHARDS, "/cpu:0", 1, None)
        b = build_step(tf, "pooled", ids, labels, SMALL, SHARDS, "/cpu:0", 1, None)
        sess.run(tf1.global_variables_initializer())
        for x, y in zip(sess.run(a.tables), sess.run(b.tables), strict=True):
            np.testing.assert_array_equal(x, y)
        assert len({float(x[0, 0]) for x in sess.run(a.tables)}) == 4  # each shard its own values


NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0: 5000000    4000    0    0    0     0          0         0  7000000    5000    0    0    0     0       0          0
"""


def test_net_dev_gives_sent_then_received_of_the_interface():
    assert parse_net_dev(NET_DEV) == (7_000_000, 5_000_000)
    assert parse_net_dev(NET_DEV, "lo") == (100, 100)
    with pytest.raises(ValueError):
        parse_net_dev(NET_DEV, "eth1")


def _block(rep: int, variant: str, worker: int, ms: list[float], sent: int) -> dict:
    return {"rep": rep, "variant": variant, "worker": worker, "step_ms": ms, "sent": sent, "received": sent}


def _others(rep: int) -> list[dict]:
    return [_block(rep, "rows+pshead", 0, [500.0], 1), _block(rep, "pooled+pshead", 0, [250.0], 1)]


def test_summary_takes_medians_per_repetition_and_bytes_per_host_and_step():
    blocks = [_block(0, "rows", 0, [300, 310, 900], 9_000_000), _block(0, "rows", 1, [305, 320, 330], 12_000_000),
              _block(0, "pooled", 0, [200, 210, 220], 6_000_000), _block(0, "pooled", 1, [190, 205, 230], 6_000_000),
              _block(1, "rows", 0, [400, 400, 400], 9_000_000), _block(1, "pooled", 0, [200, 200, 200], 6_000_000),
              *_others(0), *_others(1)]
    summary = summarize(blocks)
    assert summary["per_repetition"]["rows"]["step_ms"] == [315.0, 400.0]
    assert summary["per_repetition"]["pooled"]["step_ms"] == [207.5, 200.0]
    assert summary["per_repetition"]["rows"]["sent_mb"] == pytest.approx([3.5, 3.0])
    assert summary["step_ratios"]["rows / pooled"] == pytest.approx([315 / 207.5, 2.0])
    assert summary["step_ratio_medians"]["rows / pooled"] == pytest.approx((315 / 207.5 + 2.0) / 2)
    assert summary["step_ratio_medians"]["rows+pshead / pooled+pshead"] == pytest.approx(2.0)
    assert summary["step_ratios"]["pooled+pshead / pooled"] == pytest.approx([250 / 207.5, 1.25])


def test_summary_refuses_a_repetition_missing_a_variant():
    with pytest.raises(ValueError):
        summarize([_block(0, "rows", 0, [1.0], 1), *_others(0)])
