"""Whether an optimizer's per-variable updates read state its finish step changes.

In a step that mixes synchronous PS variables with collectives, the runtime puts a barrier between
every worker's own updates and the chief's finish step (Adam's beta powers, Keras's `iterations`,
the global_step increment) only when those updates read that state
(runtime/kernels/gradient_sync.py, `_finish_waits_for_own_updates`, decided on the built graph).
Capture records that decision on the script's graph (`GraphItem.updates_read_step_state`), and the
cost model charges the barrier by it. A graph item recorded without it (older records, TF2
scripts, fixtures) goes by the optimizer's class name and this table, which cannot see a learning
rate decayed by global_step (it makes even plain SGD's updates read it).
"""

from __future__ import annotations

from adrun.graph_item import GraphItem

# Updates that read only their own slots and the step's constant hyperparameters. Adam, AdamW,
# Adamax, Nadam (bias corrections from beta powers or `iterations`) and tf.compat.v1's AdagradDA
# (global_step) read optimizer-wide state and are left out, as is any class not named here.
_READ_NO_STATE = frozenset({
    # tf.compat.v1.train
    "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer", "AdadeltaOptimizer",
    "RMSPropOptimizer", "FtrlOptimizer", "ProximalGradientDescentOptimizer", "ProximalAdagradOptimizer",
    # tf_keras optimizer_v2 (constant learning rate, no `decay`)
    "SGD", "Adagrad", "Adadelta", "RMSprop", "Ftrl",
})


def updates_read_step_state(graph: GraphItem) -> bool:
    """Whether the runtime keeps the own-updates barrier for `graph`'s optimizer: as capture
    recorded it, else by class name. An unknown or unrecorded class counts as reading state: the
    model then charges the barrier the runtime may add, erring towards the slower step."""
    if graph.updates_read_step_state is not None:
        return graph.updates_read_step_state
    return graph.optimizer not in _READ_NO_STATE
