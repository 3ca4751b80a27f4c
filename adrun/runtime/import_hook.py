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


# graph mode: module -> patch to run once it is imported
GRAPH_PATCHES: dict[str, Callable[[], None]] = {
    "tensorflow": _install_tensorflow,
    "tf_keras.src.optimizers.legacy.optimizer_v2": _install_tf_keras,
    "tf_keras.src.engine.training": _install_tf_keras_saving,
}


def patches_for_task() -> dict[str, list[Callable[[], None]]]:
    """Module -> the patches to run once it is imported, for this task's mode and script kind.

    Run mode knows the kind from its plan (`Strategy.kind`): a TF2 script gets adrun/runtime/tf2/
    only, a graph script the graph patches only. Capture does not know it yet: it installs both, and
    whichever the script reaches first (a Session with an optimizer step, or an eager optimizer
    apply) describes it. Profile mode is graph mode's. PS tasks run adrun's own PS program."""
    from adrun.runtime.context import current

    ctx = current()
    if ctx.role != "worker":
        return {}
    if ctx.mode == "run" and ctx.strategy.kind == "tf2":
        from adrun.runtime.tf2.install import patches

        found = {module: [patch] for module, patch in patches("run").items()}
        # TF2 mode's surroundings (chief-only saving, --shard-data, version check): the modules of
        # adrun/runtime/tf2/around.py (AROUND_PATCHES) are registered here.
        return found
    found = {module: [patch] for module, patch in GRAPH_PATCHES.items()}
    if ctx.mode == "capture":
        from adrun.runtime.tf2.install import patches

        for module, patch in patches("capture").items():
            found.setdefault(module, []).append(patch)
    return found


def _after_imports(patches: dict[str, list[Callable[[], None]]]) -> None:
    """Run each module's patches now if it is already imported, else right after it is."""
    pending = {}
    for module, listed in patches.items():
        run = _in_order(listed)
        if module in sys.modules:
            run()
        else:
            pending[module] = run
    if pending:
        sys.meta_path.insert(0, _PostImportFinder(pending))


def _in_order(listed: list[Callable[[], None]]) -> Callable[[], None]:
    def run() -> None:
        for patch in listed:
            patch()

    return run


def _dispatch() -> None:
    _after_imports(patches_for_task())


def install_after_tensorflow_import() -> None:
    """Decide what to install once the script imports `tensorflow` (reading the task's context and
    plan there, where a bad one fails the script's import instead of a start-up hook Python would
    only warn about), and install it."""
    _after_imports({"tensorflow": [_dispatch]})
