"""Whether an optimizer's per-variable updates read state its finish step changes, by class name.

In a step that mixes synchronous PS variables with collectives, the runtime puts a barrier between
every worker's own updates and the chief's finish step (Adam's beta powers, Keras's `iterations`,
the global_step increment) only when those updates read that state
(runtime/kernels/gradient_sync.py, `_finish_waits_for_own_updates`, decided on the built graph).
The cost model plans before any graph is rewritten and knows only the optimizer's class name
(`GraphItem.optimizer`), so it charges that barrier by this table. A learning rate decayed by
global_step makes even plain SGD's updates read it: the class name cannot tell, and the model
then charges one barrier too few.
"""

from __future__ import annotations

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


def updates_read_step_state(optimizer: str | None) -> bool:
    """Whether the runtime keeps the own-updates barrier for `optimizer` (a class name). An unknown
    or unrecorded class counts as reading state: the model then charges the barrier the runtime
    may add, erring towards the slower step."""
    return optimizer not in _READ_NO_STATE
