"""A split variable's Keras 3 optimizer update, shard by shard, each shard's on its own PS (PartitionedPS).

ps_updates.py runs the update step of a variable held whole under its PS's device scope. A split
variable (ps_shards.py) has one device per shard, so its update ran on the chief, which read each
shard's mean gradient and the optimizer's slots from the PSs and wrote the new values back
(sparse_keras under PartitionedPS, commodity, 2 hosts: 1.50x the byte bound). Here Keras's own
update step runs once per shard, under that shard's device, on that shard's part of the gradient,
with the shard standing in for the variable (its index in the optimizer, which finds the slots) and
each slot's shard for the slot (the Keras slot wraps its shard meanwhile; ps_shards.py records each
split variable's slots). The ops and kernels are Keras's own; they see the shard's rows.

That equals the update of the whole variable only for an update rule that treats each element on
its own. Read from the installed Keras 3.15 sources (`update_step` of each): SGD (momentum,
Nesterov), Adam and AdamW (amsgrad too), Adamax, Nadam, Adagrad, RMSprop (centered too), Adadelta,
Ftrl and Lion are element-wise in the gradient, the variable and the slots, their other inputs
scalars of the optimizer's own state; a sparse gradient's part has shard-local ids and the shard's
shape, so it densifies or scatters into the shard as the whole would into the whole. Lamb (norms of
the whole variable), Adafactor (row and column factors), Muon (matrix iterations), any other class
and a subclass overriding `update_step` keep the whole update on the worker. Weight decay, EMA and
constraints are Keras's, outside the update step, on the whole variable.

The gradient's parts: the chief's synchronous mean of a split variable is made per shard on that
shard's PS (ps_exchange.py); ps_apply.py joins the parts for Keras's `apply` and names them here
(`known_parts`). Keras hands the update step what it was given (through TF's default strategy's
all-reduce, an identity), so each shard's update takes its own part, and inside a `tf.function` the
join, used by nothing else, is pruned: no mean crosses to the chief. A gradient not known as a join
(clipped, unscaled, accumulated, an asynchronous worker's own, or an eager one, which the identity
copies) is cut where it is (ps_shards.split_gradient) and each part sent to its shard's PS.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from adrun.runtime.tf2.ps_shards import SplitVariable, split_gradient

_ELEMENT_WISE = (("sgd", "SGD"), ("adam", "Adam"), ("adamax", "Adamax"), ("nadam", "Nadam"), ("adagrad", "Adagrad"),
                 ("rmsprop", "RMSprop"), ("adadelta", "Adadelta"), ("ftrl", "Ftrl"), ("lion", "Lion"))
_IDENTITIES = ("Identity", "IdentityN")

_known = threading.local()  # .joins: (joined gradient, its parts) of the apply being made


def element_wise(optimizer: Any) -> bool:
    """Whether a Keras 3 `optimizer`'s update step treats each element of a variable on its own, so
    that it may run shard by shard."""
    steps = []
    for module, name in _ELEMENT_WISE:
        found = sys.modules.get(f"keras.src.optimizers.{module}")
        if found is not None:
            steps.append(getattr(found, name).update_step)
    return type(optimizer).update_step in steps


def split_for_update(optimizer: Any, variable: Any) -> SplitVariable | None:
    """`variable` (the tf.Variable Keras updates) when its update runs shard by shard, else None."""
    if isinstance(variable, SplitVariable) and element_wise(optimizer):
        return variable
    return None


@contextlib.contextmanager
def known_parts(joins: list[tuple[Any, list[Any]]]) -> Iterator[None]:
    """Within: each (joined gradient, its shards' parts) of `joins` is updated from its parts."""
    outer = getattr(_known, "joins", [])
    _known.joins = joins
    try:
        yield
    finally:
        _known.joins = outer


def parts_of(grad: Any, variable: SplitVariable) -> list[Any]:
    """`grad` of the whole `variable` as its shards' gradients: the known parts of a join, else cut."""
    for joined, parts in getattr(_known, "joins", []):
        if _passed_on(grad, joined):
            return parts
    return split_gradient(grad, [int(shard.shape[0]) for shard in variable.variables])


def _passed_on(grad: Any, joined: Any) -> bool:
    """Whether `grad` is `joined`, or in a graph `joined` through identities."""
    while grad is not joined:
        if not (isinstance(grad, tf.Tensor) and tf.is_symbolic_tensor(grad)) or grad.op.type not in _IDENTITIES:
            return False
        grad = grad.op.inputs[grad.value_index]
    return True


def update_by_shards(optimizer: Any, step: Callable[[Any, Any], None], grad: Any, variable: SplitVariable) -> None:
    """`step(gradient, variable)` (Keras's update of one variable) once per shard of `variable`, under
    the shard's device, with the shard for the variable and its part of `grad` for the gradient."""
    for k, part in enumerate(parts_of(grad, variable)):
        with _as_shard(optimizer, variable, k) as shard, tf.device(shard.device):
            step(part, shard)


@contextlib.contextmanager
def _as_shard(optimizer: Any, variable: SplitVariable, k: int) -> Iterator[Any]:
    """Within: shard k of `variable` has the variable's index in `optimizer`, and each of the
    variable's slots wraps its own shard k; yields the shard."""
    shard = variable.variables[k]
    key = optimizer._var_key(shard)
    wholes = [(slot, slot._value, slot._shape) for slot in variable.slots]
    optimizer._trainable_variables_indices[key] = optimizer._get_variable_index(variable)
    try:
        for slot, whole, _ in wholes:
            if not isinstance(whole, SplitVariable) or len(whole.variables) != len(variable.variables):
                raise RuntimeError(f"the optimizer slot '{slot.path}' of '{variable.name}' is not split as its variable")
            slot._value = whole.variables[k]
            slot._shape = tuple(slot._value.shape)
        yield shard
    finally:
        del optimizer._trainable_variables_indices[key]
        for slot, whole, shape in wholes:
            slot._value, slot._shape = whole, shape
