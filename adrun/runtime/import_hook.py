"""Install adrun's patches right after the user's script imports the modules they patch.

Importing TensorFlow (or tf_keras) ourselves would cost seconds in every process and change
import order, so a meta-path finder waits for the script's own imports and runs each patch right
after its module has finished executing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType


class _AfterImportLoader(importlib.abc.Loader):
    def __init__(self, wrapped: importlib.abc.Loader, then: Callable[[], None]) -> None:
        self._wrapped = wrapped
        self._then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._wrapped.exec_module(module)
        self._then()


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict[str, Callable[[], None]]) -> None:
        self._patches = patches

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        then = self._patches.pop(fullname, None)
        if then is None:
            return None
        if not self._patches:
            sys.meta_path.remove(self)
        spec = _find_with_other_finders(self, fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _AfterImportLoader(spec.loader, then)
        return spec


def _find_with_other_finders(me, fullname, path, target):  # type: ignore[no-untyped-def]
    for finder in sys.meta_path:
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _install_tensorflow() -> None:
    from adrun.runtime.patches import install

    install()


def _install_tf_keras() -> None:
    from adrun.runtime.patches import install_tf_keras

    install_tf_keras()


def _install_tf_keras_saving() -> None:
    from adrun.runtime.patches import install_tf_keras_saving

    install_tf_keras_saving()


# module -> patch to run once it is imported
PATCHES: dict[str, Callable[[], None]] = {
    "tensorflow": _install_tensorflow,
    "tf_keras.src.optimizers.legacy.optimizer_v2": _install_tf_keras,
    "tf_keras.src.engine.training": _install_tf_keras_saving,
}


def install_after_tensorflow_import() -> None:
    """Run each patch now if its module is already imported, else right after it is."""
    pending = {}
    for module, patch in PATCHES.items():
        if module in sys.modules:
            patch()
        else:
            pending[module] = patch
    if pending:
        sys.meta_path.insert(0, _PostImportFinder(pending))
