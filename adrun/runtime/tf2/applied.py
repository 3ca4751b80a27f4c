"""What a TF2 script's optimizer applies train, as a GraphItem: one recorder that capture and the
profiling run share, so that both describe the script alike (the same names in the same order, the
same fingerprint) and a plan made from a profile fits the run."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from adrun.graph_item import GraphItem, KerasFlavour, VariableInfo
from adrun.runtime.tf2.optimizer_hooks import VariableNames, is_sparse


class AppliedVariables:
    """The variables and optimizers of the applies seen so far, in the order they were seen."""

    def __init__(self) -> None:
        self.names = VariableNames()
        self._variables: dict[str, VariableInfo] = {}
        self._optimizers: list[str] = []
        self._keras: set[str] = set()  # flavours of the optimizers seen

    def add(self, optimizer: Any, grads: list[Any], variables: list[Any]) -> None:
        """Record one apply's trained variables (a variable without a gradient is not trained)."""
        name = type(optimizer).__name__
        self._keras.add("tf_keras" if type(optimizer).__module__.startswith("tf_keras") else "keras3")
        if name not in self._optimizers:
            self._optimizers.append(name)
        for grad, var in zip(grads, variables, strict=True):
            if grad is None:
                continue
            path = self.names(var)
            self._variables.setdefault(path, VariableInfo(
                name=path, shape=[-1 if d is None else int(d) for d in var.shape], dtype=tf.as_dtype(var.dtype).name,
                trainable=True, grad="sparse" if is_sparse(grad) else "dense",
            ))

    def graph_item(self, batch_size: int | None = None) -> GraphItem:
        """The item of what was seen; `keras` is tf_keras when any optimizer is tf_keras's (what
        refuses split PS variables), else Keras 3."""
        keras: KerasFlavour = "tf_keras" if "tf_keras" in self._keras else "keras3"
        return GraphItem(kind="tf2", keras=keras, variables=list(self._variables.values()),
                         optimizer=", ".join(self._optimizers), batch_size=batch_size)
