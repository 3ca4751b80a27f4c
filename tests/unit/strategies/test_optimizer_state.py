"""The cost model's table of optimizers (strategies/optimizer_state.py) against the runtime's own
decision on a built graph (runtime/kernels/gradient_sync.py, `_finish_waits_for_own_updates`)."""

from __future__ import annotations

import pytest

from adrun.graph_item import GraphItem
from adrun.strategies.optimizer_state import updates_read_step_state

tf = pytest.importorskip("tensorflow")


def _runtime_waits(make_optimizer, v1: bool = True) -> bool:
    """Whether the runtime would put the own-updates barrier before this optimizer's finish, with
    every variable's update a worker's own (all-reduced): the analysis capture records
    (`gradient_sync.updates_read_finish_state`). `make_optimizer(global_step)` builds the optimizer;
    a tf.compat.v1 one applies with minimize's global_step increment, a tf_keras one (`v1` False)
    with its own `iterations` increment."""
    from adrun.runtime.kernels.gradient_sync import updates_read_finish_state

    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.get_variable("a", initializer=tf.ones([4]))
        b = tf.compat.v1.get_variable("b", initializer=tf.ones([4]))
        step = tf.compat.v1.train.get_or_create_global_step()
        grads = tf.gradients(tf.reduce_sum(a * b), [a, b])
        optimizer = make_optimizer(step)
        before = len(graph.get_operations())
        optimizer.apply_gradients(list(zip(grads, [a, b], strict=True)), **({"global_step": step} if v1 else {}))
        new_ops = graph.get_operations()[before:]
    waits = updates_read_finish_state(new_ops, ["a", "b"])
    assert waits is not None, "no update_<variable> blocks found"
    return waits


def _by_name(optimizer: str | None) -> bool:
    """The table's answer for a graph item recorded without capture's own decision."""
    return updates_read_step_state(GraphItem(variables=[], optimizer=optimizer))


v1 = tf.compat.v1.train
V1_OPTIMIZERS = {
    "GradientDescentOptimizer": lambda step: v1.GradientDescentOptimizer(0.1),
    "MomentumOptimizer": lambda step: v1.MomentumOptimizer(0.1, 0.9),
    "AdagradOptimizer": lambda step: v1.AdagradOptimizer(0.1),
    "AdadeltaOptimizer": lambda step: v1.AdadeltaOptimizer(0.1),
    "RMSPropOptimizer": lambda step: v1.RMSPropOptimizer(0.1),
    "FtrlOptimizer": lambda step: v1.FtrlOptimizer(0.1),
    "ProximalGradientDescentOptimizer": lambda step: v1.ProximalGradientDescentOptimizer(0.1),
    "ProximalAdagradOptimizer": lambda step: v1.ProximalAdagradOptimizer(0.1),
    "AdamOptimizer": lambda step: v1.AdamOptimizer(0.1),
    "AdagradDAOptimizer": lambda step: v1.AdagradDAOptimizer(0.1, step),
}


@pytest.mark.parametrize("name", sorted(V1_OPTIMIZERS))
def test_the_table_agrees_with_the_runtime_on_tf_compat_v1_optimizers(name):
    assert _by_name(name) is _runtime_waits(V1_OPTIMIZERS[name])


def test_the_oracle_finds_both_kinds():
    """The agreement above is not vacuous: the runtime waits for Adam and not for plain SGD."""
    assert _runtime_waits(V1_OPTIMIZERS["AdamOptimizer"])
    assert not _runtime_waits(V1_OPTIMIZERS["GradientDescentOptimizer"])


def _tf_keras_optimizers() -> dict:
    """The tf_keras optimizers a graph script applies (adrun patches the legacy OptimizerV2's
    apply_gradients in graph mode), by the class name capture records."""
    legacy = pytest.importorskip("tf_keras").optimizers.legacy
    return {name: getattr(legacy, name) for name in
            ("SGD", "Adagrad", "Adadelta", "RMSprop", "Ftrl", "Adam", "Adamax", "Nadam")}


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adadelta", "RMSprop", "Ftrl", "Adam", "Adamax", "Nadam"])
def test_the_table_agrees_with_the_runtime_on_tf_keras_optimizers(name):
    cls = _tf_keras_optimizers()[name]
    assert cls.__name__ == name
    assert _by_name(name) is _runtime_waits(lambda step: cls(0.1), v1=False)


def test_the_oracle_sees_a_decayed_learning_rate():
    """What the table cannot see: SGD's updates read global_step through a decayed learning rate
    (and tf_keras's through a schedule of `iterations`)."""
    assert _runtime_waits(lambda step: v1.GradientDescentOptimizer(v1.exponential_decay(0.1, step, 100, 0.9)))
    schedule = pytest.importorskip("tf_keras").optimizers.schedules.ExponentialDecay(0.1, 100, 0.9)
    assert _runtime_waits(lambda step: _tf_keras_optimizers()["SGD"](schedule), v1=False)


@pytest.mark.parametrize("name", [None, "MyOwnOptimizer"])
def test_an_unknown_optimizer_is_charged_the_barrier(name):
    assert _by_name(name)


@pytest.mark.parametrize("recorded", [True, False])
def test_what_capture_recorded_wins_over_the_table(recorded):
    for name in ("GradientDescentOptimizer", "AdamOptimizer", None):
        item = GraphItem(variables=[], optimizer=name, updates_read_step_state=recorded)
        assert updates_read_step_state(item) is recorded
