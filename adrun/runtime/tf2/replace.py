"""Replacing a function of Keras, tf_keras or TensorFlow wherever a loaded module holds it.

`import tensorflow` imports Keras (or, with TF_USE_LEGACY_KERAS=1, tf_keras) whole, its public API
modules included, before adrun's hook learns what the task runs
(`import_hook.install_after_tensorflow_import`). Those modules bind functions with `from ... import`:
`keras.models.load_model` and `keras.saving.save_model` are the very function objects of
`keras.src.saving.saving_api`. Replacing the attribute of `saving_api` alone would leave them as
they were, so a script calling `keras.models.load_model` would get none of adrun's wrapping (seen:
the chief's load of a model broadcasting its fresh variables to workers that never load, and
waiting for them until the collective timed out). So the replacement is also put wherever a loaded
module of the same top-level package holds the original; a module imported later takes it from the
patched module. A method is replaced on its class alone: it is looked up there at every call.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def replace_function(owner: ModuleType | type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Set `owner.name` to `make(original)` (with the original's name and docstring), and rebind
    every alias of a module function in the loaded modules of its package."""
    original = getattr(owner, name)
    replacement = functools.wraps(original)(make(original))
    setattr(owner, name, replacement)
    if isinstance(owner, ModuleType):
        _rebind(owner.__name__.split(".")[0], original, replacement)


def _rebind(package: str, original: object, replacement: object) -> None:
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".", 1)[0] != package:
            continue
        namespace = getattr(module, "__dict__", {})
        for attribute, value in list(namespace.items()):
            if value is original:
                namespace[attribute] = replacement
