"""What surrounds a TF2-mode run, as post-import installers the hook runs in a run-mode task:
chief-only writes (chief_only.py), the variables of saving kept unbroadcast (local_saving.py),
`--shard-data` for `fit` (input_sharding.py) and the check that
each private module adrun patches still has what it needs (runtime/versions.py).

`AROUND_PATCHES` maps a module name to its installer, run right after the script's import of that
module. Each installer first checks the module's private attributes (one clear error instead of an
AttributeError deep in a trace), then installs what the task needs; a module the TF2 core patches
too (the optimizers) appears here with its check alone, to be run before the core's patch.
"""

from __future__ import annotations

from collections.abc import Callable

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2 import chief_only, input_sharding, local_saving
from adrun.runtime.versions import TF2

__all__ = ["AROUND_PATCHES", "PROFILE_PATCHES"]


_installed: set[str] = set()


def _checked(module_name: str, installs: list[Callable[[TaskContext], None]]) -> Callable[[TaskContext], None]:
    """Check, then install, once per process: a second wrapper would shard the input twice."""
    def installer(ctx: TaskContext) -> None:
        if module_name in _installed:
            return
        _installed.add(module_name)
        if module_name in TF2.private:
            TF2.check_module(module_name)
        for install in installs:
            install(ctx)
    return installer


def _patches() -> dict[str, Callable[[TaskContext], None]]:
    # TensorFlow's modules are checked by check_versions(); the Keras ones when they are imported
    by_module: dict[str, list[Callable[[TaskContext], None]]] = {
        name: [] for name in TF2.private if not name.startswith("tensorflow.")}
    for patches in (chief_only.PATCHES, input_sharding.PATCHES, local_saving.PATCHES):
        for module_name, install in patches.items():
            by_module.setdefault(module_name, []).append(install)
    return {name: _checked(name, installs) for name, installs in by_module.items()}


AROUND_PATCHES: dict[str, Callable[[TaskContext], None]] = _patches()

# profile mode (the profiling run of `adrun profile` and Auto, one process that is worker 0): every
# write of the script goes where a non-chief's goes, so the real run finds no checkpoint, backup or
# saved model of the profile's to resume from (graph mode's profile writes nothing either,
# adrun/runtime/no_trace.py)
PROFILE_PATCHES: dict[str, Callable[[TaskContext], None]] = {
    name: _checked(name, [install]) for name, install in chief_only.WRITES.items()}
