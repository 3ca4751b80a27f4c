"""The profiling run's row counters (adrun/runtime/profiler.py) on graphs: each counts the distinct
ids of one sparse gradient and is fetched only with the optimizer step it belongs to."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.grads import GradientRecord  # noqa: E402
from adrun.runtime.profiler import add_row_counters, counters_run_by  # noqa: E402


def minimize(optimizer, loss):
    """What the hook records at `apply_gradients`: the pairs and the step op."""
    pairs = optimizer.compute_gradients(loss)
    call = GradientRecord(optimizer, pairs)
    call.train_op = optimizer.apply_gradients(pairs)
    return call


def test_counters_count_distinct_ids_of_the_step_they_belong_to():
    with tf.Graph().as_default() as graph:
        ids_a = tf1.placeholder(tf.int64, [None])
        ids_b = tf1.placeholder(tf.int64, [None])
        emb_a = tf1.get_variable("emb_a", [10, 2])
        emb_b = tf1.get_variable("emb_b", [10, 2])
        dense = tf1.get_variable("dense", [2])
        loss_a = tf.reduce_sum(tf.nn.embedding_lookup(emb_a, ids_a) * dense)
        loss_b = tf.reduce_sum(tf.nn.embedding_lookup(emb_b, ids_b))
        call_a = minimize(tf1.train.GradientDescentOptimizer(0.1), loss_a)
        call_b = minimize(tf1.train.AdagradOptimizer(0.1), loss_b)
        add_row_counters(graph, call_a)
        add_row_counters(graph, call_b)
        step_b_and_metrics = tf.group(call_b.train_op, name="step_b_and_metrics")
        init = tf1.global_variables_initializer()

    [counter_a] = counters_run_by(graph, call_a.train_op)
    [counter_b] = counters_run_by(graph, {"caller": step_b_and_metrics})  # MonitoredSession-like
    assert (counter_a.variable, counter_b.variable) == ("emb_a", "emb_b")  # the dense variable has none
    assert counters_run_by(graph, [loss_a, loss_b]) == []
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        feed = {ids_a: [3, 3, 5, 7, 3], ids_b: [1, 2, 1, 1]}
        assert sess.run([counter_a.distinct, counter_b.distinct], feed) == [3, 2]

