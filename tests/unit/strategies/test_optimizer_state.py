"""The cost model's table of optimizers (strategies/optimizer_state.py) against the runtime's own
decision on a built graph (runtime/kernels/gradient_sync.py, `_finish_waits_for_own_updates`)."""

from __future__ import annotations

import pytest

from adrun.strategies.optimizer_state import updates_read_step_state

tf = pytest.importorskip("tensorflow")


def _runtime_waits(make_optimizer) -> bool:
    """Whether the runtime would put the own-updates barrier before this optimizer's finish, with
    every variable's update a worker's own (all-reduced) and minimize's global_step increment.
    `make_optimizer(global_step)` builds the optimizer."""
    from adrun.runtime.kernels.gradient_sync import (
        _after_updates, _finish_waits_for_own_updates, _update_scope, update_ops_by_variable)

    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.get_variable("a", initializer=tf.ones([4]))
        b = tf.compat.v1.get_variable("b", initializer=tf.ones([4]))
        step = tf.compat.v1.train.get_or_create_global_step()
        loss = tf.reduce_sum(a * b)
        optimizer = make_optimizer(step)
        grads = optimizer.compute_gradients(loss, [a, b])
        before = len(graph.get_operations())
        optimizer.apply_gradients(grads, global_step=step)
        new_ops = graph.get_operations()[before:]
    names = ["a", "b"]
    scope = _update_scope(new_ops, names)
    updates = [u for us in update_ops_by_variable(new_ops, scope, names).values() for u in us]
    return _finish_waits_for_own_updates(_after_updates(new_ops, updates, scope), updates)


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
    assert updates_read_step_state(name) is _runtime_waits(V1_OPTIMIZERS[name])


def test_the_oracle_finds_both_kinds():
    """The agreement above is not vacuous: the runtime waits for Adam and not for plain SGD."""
    assert _runtime_waits(V1_OPTIMIZERS["AdamOptimizer"])
    assert not _runtime_waits(V1_OPTIMIZERS["GradientDescentOptimizer"])


@pytest.mark.parametrize("name", [None, "MyOwnOptimizer"])
def test_an_unknown_optimizer_is_charged_the_barrier(name):
    assert updates_read_step_state(name)
