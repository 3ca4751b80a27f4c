"""Capture records the runtime's own decision on whether an optimizer's updates read state its
finish step changes (GraphItem.updates_read_step_state): the cost model charges a mixed step's
own-updates barrier by it (strategies/optimizer_state.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime import patches  # noqa: E402
from adrun.runtime.capture import describe_graph  # noqa: E402


def _constant_sgd(step):
    return tf1.train.GradientDescentOptimizer(0.1)


def _decayed_sgd(step):
    return tf1.train.GradientDescentOptimizer(tf1.train.exponential_decay(0.1, step, 100, 0.9))


def _adam(step):
    return tf1.train.AdamOptimizer(0.1)


def _momentum(step):
    return tf1.train.MomentumOptimizer(0.1, 0.9)


def _captured(monkeypatch, make_optimizer):
    """The GraphItem capture describes for a two-variable model trained by minimize (with the
    global_step increment), through the capture-mode apply_gradients patch."""
    base = tf1.train.Optimizer
    monkeypatch.setattr(base, "apply_gradients", base.apply_gradients)  # restored after the test
    patches._patch_apply_gradients(base, SimpleNamespace(mode="capture"))
    graph = tf.Graph()
    with graph.as_default():
        a = tf1.get_variable("a", initializer=tf.ones([4]))
        b = tf1.get_variable("b", initializer=tf.ones([4]))
        step = tf1.train.get_or_create_global_step()
        make_optimizer(step).minimize(tf.reduce_sum(a * b), global_step=step)
    return describe_graph(graph)


@pytest.mark.parametrize("make_optimizer, reads", [
    (_constant_sgd, False), (_momentum, False), (_decayed_sgd, True), (_adam, True)])
def test_capture_records_whether_the_updates_read_state_the_finish_changes(monkeypatch, make_optimizer, reads):
    """A learning rate decayed by global_step makes plain SGD's updates read the step its finish
    increments, which its class name cannot tell: capture records what the runtime decides."""
    item = _captured(monkeypatch, make_optimizer)
    assert item.updates_read_step_state is reads
    assert item.optimizer in ("GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer")


def test_a_graph_without_an_optimizer_step_records_nothing():
    graph = tf.Graph()
    with graph.as_default():
        tf1.get_variable("a", initializer=tf.ones([4]))
    assert describe_graph(graph).updates_read_step_state is None
