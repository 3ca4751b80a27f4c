"""Keras 3 variables' `assign_add` / `assign_sub` as one update op in a parameter-server plan.

Keras 3 adds by reading the value and assigning the sum (`backend/common/variables.py`), which is
two operations. On a variable shared on a PS that several workers update (asynchronous and
bounded-staleness plans) a worker's add can then overwrite another's: measured, 2 workers of 8
steps each left the optimizer's shared step count at 13 instead of 16. TF's own
`AssignAddVariableOp` adds under the variable's lock, so every worker's increment counts (as graph
mode's update ops do). Variables Keras updates inside a stateless scope keep Keras's path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def atomic_updates() -> None:
    """Patch Keras 3's TensorFlow Variable: add and subtract through the tf.Variable's own op."""
    from keras.src.backend.common.stateless_scope import in_stateless_scope
    from keras.src.backend.tensorflow.core import Variable

    def make(name: str) -> Callable[[Any, Any], Any]:
        keras_update = getattr(Variable, name)

        def update(self: Any, value: Any) -> Any:
            if in_stateless_scope():
                return keras_update(self, value)
            getattr(self._value, name)(self._convert_to_tensor(value, dtype=self._dtype))
            return self._value

        return update

    Variable.assign_add = make("assign_add")
    Variable.assign_sub = make("assign_sub")
