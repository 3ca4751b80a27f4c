"""Where a TF2 script applies gradients: every optimizer's outermost apply.

Keras 3 optimizers apply through `BaseOptimizer.apply` (its `apply_gradients` calls it), tf_keras
through `apply_gradients` (the new `Optimizer` and the legacy `OptimizerV2`). Wrappers such as a
`LossScaleOptimizer` override the method and call their inner optimizer's, so only the outermost call
of a thread is handed to the hook (a thread-local depth): every worker's loss-scale finite check then
sees the same gradients. Subclasses that override the method, defined before or after the patch, are
wrapped too (`__init_subclass__`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

_local = threading.local()
_WRAPPED = "__adrun_tf2_wrapped__"


class ApplyHook(Protocol):
    def before(self, optimizer: Any, grads: list[Any], variables: list[Any]) -> list[Any]:
        """The gradients the optimizer applies instead of `grads` (same order, None kept)."""


class AroundHook(Protocol):
    """A hook that decides whether and when the optimizer applies, not only what: in a synchronous
    parameter-server plan only the chief applies, between taking the mean and releasing the others
    (ps_apply.py)."""

    def around(self, optimizer: Any, grads: list[Any], variables: list[Any],
               apply: Callable[[list[Any]], Any]) -> Any:
        """The apply call's result; `apply(grads)` runs the optimizer's own apply with `grads`."""


Hook = ApplyHook | AroundHook


def _run(hook: Hook, optimizer: Any, grads: list[Any], variables: list[Any],
         apply: Callable[[list[Any]], Any]) -> Any:
    """An apply under `hook`: an AroundHook runs it itself, an ApplyHook gives its gradients."""
    around = getattr(hook, "around", None)
    if around is not None:
        return around(optimizer, grads, variables, apply)
    return apply(hook.before(optimizer, grads, variables))  # type: ignore[union-attr]


Args = tuple[Any, ...]
Kwargs = dict[str, Any]
# (optimizer, args, kwargs) -> (grads, variables) of an apply call
Split = Callable[[Any, Args, Kwargs], tuple[list[Any], list[Any]]]
# (args, kwargs, grads, variables) -> the call's (args, kwargs) with `grads` put in
Join = Callable[[Args, Kwargs, list[Any], list[Any]], tuple[Args, Kwargs]]


def _outermost(original: Callable[..., Any], hook: Hook, split: Split, join: Join) -> Callable[..., Any]:
    """`original` with the hook around its outermost call; `split` gives the call's (grads,
    variables), `join` the call's arguments with the hook's gradients put in."""

    @functools.wraps(original)
    def apply(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "depth", 0):
            return original(self, *args, **kwargs)
        _local.depth = 1
        try:
            grads, variables = split(self, args, kwargs)

            def apply(new_grads: list[Any]) -> Any:
                new_args, new_kwargs = join(args, kwargs, new_grads, variables)
                return original(self, *new_args, **new_kwargs)

            return _run(hook, self, grads, variables, apply)
        finally:
            _local.depth = 0

    setattr(apply, _WRAPPED, True)
    return apply


def _keras3_split(optimizer: Any, args: Args, kwargs: Kwargs) -> tuple[list[Any], list[Any]]:
    grads = list(args[0] if args else kwargs["grads"])
    variables = args[1] if len(args) > 1 else kwargs.get("trainable_variables")
    variables = list(variables) if variables is not None else list(optimizer._trainable_variables)
    return grads, variables


def _keras3_join(args: Args, kwargs: Kwargs, grads: list[Any], variables: list[Any]) -> tuple[Args, Kwargs]:
    rest = {k: v for k, v in kwargs.items() if k not in ("grads", "trainable_variables")}
    return (grads, variables), rest


def _pairs_split(optimizer: Any, args: Args, kwargs: Kwargs) -> tuple[list[Any], list[Any]]:
    pairs = list(args[0] if args else kwargs["grads_and_vars"])
    return [g for g, _ in pairs], [v for _, v in pairs]


def _pairs_join(args: Args, kwargs: Kwargs, grads: list[Any], variables: list[Any]) -> tuple[Args, Kwargs]:
    rest = {k: v for k, v in kwargs.items() if k != "grads_and_vars"}
    return (list(zip(grads, variables, strict=True)), *args[1:]), rest


def _wrap_family(base: type, method: str, hook: Hook, split: Split, join: Join) -> None:
    """Wrap `method` of `base`, of its subclasses that override it, and of those defined later."""

    def wrap(cls: type) -> None:
        original = cls.__dict__.get(method)
        if original is not None and not getattr(original, _WRAPPED, False):
            setattr(cls, method, _outermost(original, hook, split, join))

    def subclasses(cls: type) -> Iterator[type]:
        direct: list[type] = cls.__subclasses__()
        for sub in direct:
            yield sub
            yield from subclasses(sub)

    wrap(base)
    for sub in list(subclasses(base)):
        wrap(sub)
    own = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, /, **kwargs: Any) -> None:
        if own is not None:
            own.__func__(cls, **kwargs)
        else:
            # mypy reads a variable typed `type` as an instance here; `base` is the class itself
            super(base, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
        wrap(cls)

    # replacing a class's hook at run time is the point: mypy types a method as fixed
    base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[method-assign,assignment]


def hook_keras3(hook: Hook) -> None:
    """Keras 3: `BaseOptimizer.apply(grads, trainable_variables=None)`."""
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    _wrap_family(BaseOptimizer, "apply", hook, _keras3_split, _keras3_join)


def hook_tf_keras(hook: Hook) -> None:
    """tf_keras's optimizers (`tf_keras.optimizers.*`): `apply_gradients(grads_and_vars, ...)`."""
    from tf_keras.src.optimizers.optimizer import _BaseOptimizer

    _wrap_family(_BaseOptimizer, "apply_gradients", _eager_only(hook), _pairs_split, _pairs_join)


def hook_tf_keras_legacy(hook: Hook) -> None:
    """tf_keras's legacy optimizers (`tf_keras.optimizers.legacy.*`, OptimizerV2)."""
    from tf_keras.src.optimizers.legacy.optimizer_v2 import OptimizerV2

    _wrap_family(OptimizerV2, "apply_gradients", _eager_only(hook), _pairs_split, _pairs_join)


class _eager_only:
    """A hook that leaves graph-mode applies alone: a tf_keras script that disabled eager execution
    is a graph-mode script, whose applies adrun's graph patches handle (adrun/runtime/patches.py)."""

    def __init__(self, hook: Hook) -> None:
        self._hook = hook

    def around(self, optimizer: Any, grads: list[Any], variables: list[Any],
               apply: Callable[[list[Any]], Any]) -> Any:
        from tensorflow.python.framework import ops

        if not ops.executing_eagerly_outside_functions():
            return apply(grads)
        return _run(self._hook, optimizer, grads, variables, apply)


class VariableNames:
    """Each trained variable's name in the GraphItem and the plan: Keras 3's `path`, else the TF
    name without `:0`; a second variable of an already-used name gets `#2` (then `#3`, ...), in the
    order the applies name them, which every worker of the same script repeats."""

    def __init__(self) -> None:
        self._by_id: dict[int, str] = {}
        self._used: set[str] = set()
        self._keep: list[Any] = []  # the variables named, so their ids stay theirs

    def __call__(self, var: Any) -> str:
        name = self._by_id.get(id(var))
        if name is not None:
            return name
        base = getattr(var, "path", None) or var.name.split(":")[0]
        name, n = base, 1
        while name in self._used:
            n += 1
            name = f"{base}#{n}"
        self._by_id[id(var)] = name
        self._used.add(name)
        self._keep.append(var)
        return name


def is_sparse(grad: Any) -> bool:
    import tensorflow as tf

    return isinstance(grad, tf.IndexedSlices)


def traced_batch_size() -> Any:  # a tf.Tensor or None; Any: TensorFlow's types are not checked here
    """The batch size of the function being traced: the leading size of its first argument with
    one (Keras's train step and a custom loop's step take the batch first); None if it has none."""
    import tensorflow as tf

    graph = tf.compat.v1.get_default_graph()
    for t in getattr(graph, "inputs", []):
        if t.dtype not in (tf.resource, tf.variant) and t.shape.rank:
            return tf.shape(t, out_type=tf.int32)[0]
    return None
