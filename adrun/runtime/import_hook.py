"""Install adrun's patches right after the user's script imports the modules they patch.

Importing TensorFlow (or tf_keras) ourselves would cost seconds in every process and change
import order, so a meta-path finder waits for the script's own imports and runs each patch right
after its module has finished executing.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adrun.runtime.context import TaskContext


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
    """Graph mode's TensorFlow patches, once TensorFlow has the private attributes they use. A
    run-mode task (a graph plan) checks the versions and all of graph mode's attributes here;
    capture and profile, which patch TF2 scripts too, only the attributes their patches replace now
    (versions.GRAPH_AT_IMPORT), and the rest once the script is known to be a graph script
    (capture.py, profiler.py)."""
    from adrun.runtime.context import current
    from adrun.runtime.patches import install
    from adrun.runtime.refusal import refusing
    from adrun.runtime.versions import GRAPH, GRAPH_AT_IMPORT

    mode = current().mode
    refusing(GRAPH.check_versions if mode == "run" else GRAPH_AT_IMPORT[mode].check_tensorflow)()
    install()


def _install_tf_keras() -> None:
    from adrun.runtime.patches import install_tf_keras
    from adrun.runtime.refusal import refusing
    from adrun.runtime.versions import GRAPH

    refusing(functools.partial(GRAPH.check_module, "tf_keras.src.optimizers.legacy.optimizer_v2"))()
    install_tf_keras()


def _install_tf_keras_saving() -> None:
    from adrun.runtime.patches import install_tf_keras_saving
    from adrun.runtime.refusal import refusing
    from adrun.runtime.versions import GRAPH

    refusing(functools.partial(GRAPH.check_module, "tf_keras.src.engine.training"))()
    install_tf_keras_saving()


def _check_tf_keras_version() -> None:
    """A run-mode task checked graph mode's versions at `import tensorflow`, when tf_keras's counted
    only if already imported (versions.GRAPH.when_imported): the script imports it now. Capture and
    profile check every version later, once the script shows itself a graph script."""
    from adrun.runtime.context import current
    from adrun.runtime.refusal import refusing
    from adrun.runtime.versions import GRAPH

    if current().mode == "run":
        refusing(functools.partial(GRAPH.check_series, ("tf_keras",)))()


# graph mode: module -> patch to run once it is imported
GRAPH_PATCHES: dict[str, Callable[[], None]] = {
    "tensorflow": _install_tensorflow,
    "tf_keras": _check_tf_keras_version,
    "tf_keras.src.optimizers.legacy.optimizer_v2": _install_tf_keras,
    "tf_keras.src.engine.training": _install_tf_keras_saving,
}


def patches_for_task() -> dict[str, list[Callable[[], None]]]:
    """Module -> the patches to run once it is imported, for this task's mode and script kind.

    Run mode knows the kind from its plan (`Strategy.kind`): a TF2 script gets adrun/runtime/tf2/
    only, a graph script the graph patches only. Capture does not know it yet: it installs both, and
    whichever the script reaches first (a Session with an optimizer step, or an eager optimizer
    apply) describes it. Profile mode installs both too: graph mode's profiler times Session steps,
    TF2 mode's (tf2/profiler.py) optimizer applies, and a TF2 script's writes go to a scratch
    directory (tf2/around.PROFILE_PATCHES). PS tasks run adrun's own PS program."""
    from adrun.runtime.context import current

    ctx = current()
    if ctx.role != "worker":
        return {}
    if ctx.mode == "run" and ctx.strategy.kind == "tf2":
        return _tf2_run_patches(ctx)
    found = {module: [patch] for module, patch in GRAPH_PATCHES.items()}
    if ctx.mode in ("capture", "profile"):
        from adrun.runtime.tf2.install import patches

        for module, patch in patches(ctx.mode).items():
            found.setdefault(module, []).append(patch)
    if ctx.mode == "profile":
        from adrun.runtime.refusal import refusing
        from adrun.runtime.tf2.around import PROFILE_PATCHES

        for module, install in PROFILE_PATCHES.items():
            found.setdefault(module, []).append(refusing(functools.partial(install, ctx)))
    return found


def _tf2_run_patches(ctx: TaskContext) -> dict[str, list[Callable[[], None]]]:
    """TF2 run mode: the version check first, once TensorFlow has loaded; then, per module, its
    surroundings (adrun/runtime/tf2/around.py: chief-only writes, --shard-data, the module's private
    attributes checked) before the core's patch (install.py), which relies on those attributes. The
    `tensorflow.python` modules are loaded by `import tensorflow` itself, so theirs run at once. A
    UserError of any of them (an untested version, a missing attribute) refuses the script."""
    from adrun.runtime.refusal import refusing
    from adrun.runtime.tf2.around import AROUND_PATCHES
    from adrun.runtime.tf2.install import patches
    from adrun.runtime.versions import TF2

    found: dict[str, list[Callable[[], None]]] = {
        "tensorflow": [refusing(TF2.check_versions)],
        # tf_keras counts once the script imports it (TF2.when_imported): a Keras 3 script runs
        # beside an untested tf_keras merely installed
        "tf_keras": [refusing(functools.partial(TF2.check_series, ("tf_keras",)))],
    }
    for module, install in AROUND_PATCHES.items():
        found.setdefault(module, []).append(refusing(functools.partial(install, ctx)))
    for module, patch in patches("run").items():
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
