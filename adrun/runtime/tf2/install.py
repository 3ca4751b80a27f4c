"""What the import hook installs in TF2 mode (adrun/runtime/import_hook.py): per module, the patch
to run once the script has imported it.

Start-up order matters (tf2-path.md, "Import order"): `import keras` imports TensorFlow from inside
Keras, so TensorFlow's patch runs while Keras is half imported; the optimizer is patched only once
`keras.src.optimizers.base_optimizer` has loaded. TensorFlow's context is not initialized by either
import, so the collective runtime can still be configured then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adrun.runtime.context import current

_hook: Any = None  # this process's ApplyHook
_scopes: list[Any] = []  # entered for the process's life; a collected one would leave its scope


def _capture_hook() -> Any:
    from adrun.runtime.tf2.capture import capture_hook

    out = current().capture_out
    if out is None:
        raise RuntimeError("a capture-mode task without ADRUN_CAPTURE_OUT: the launcher sets it (capture_run.py)")
    return capture_hook(out)


def _profile_hook() -> Any:
    from adrun.runtime.tf2.not_profiled import RefuseProfile

    return RefuseProfile()


def _run_hook() -> Any:
    global _hook
    if _hook is None:
        import tensorflow as tf

        from adrun.runtime.metrics import StepReporter
        from adrun.runtime.tf2.broadcast import Broadcaster
        from adrun.runtime.tf2.collective_runtime import routes_of, start_collectives
        from adrun.runtime.tf2.keys import RuntimeKeys
        from adrun.runtime.tf2.reduction import TF2Collectives
        from adrun.runtime.tf2.steps import StepCounters
        from adrun.runtime.tf2.sync import SynchronizedApply

        ctx = current()
        timeout_s = ctx.settings.op_timeout_s
        keys = routes = None
        if ctx.num_workers > 1:
            from adrun.runtime.tf2.peers import report_collective_failures
            from adrun.runtime.tf2.routes import HOST, Routes

            start_collectives(ctx)
            report_collective_failures(ctx.task_index)
            keys = RuntimeKeys(Routes(ctx.task_index).device(HOST))
            routes = routes_of(ctx)
            scope = tf.variable_creator_scope(Broadcaster(ctx.task_index, ctx.num_workers, timeout_s, routes))
            scope.__enter__()
            _scopes.append(scope)
        collectives = TF2Collectives(ctx.num_workers, timeout_s=timeout_s, keys=keys, routes=routes)
        _hook = SynchronizedApply(ctx, collectives, StepCounters(StepReporter(ctx.settings.max_steps)))
    return _hook


def _installer(hook_of: Callable[[], Any], patch_name: str) -> Callable[[], None]:
    def install() -> None:
        from adrun.runtime.tf2 import optimizer_hooks

        getattr(optimizer_hooks, patch_name)(hook_of())

    return install


def _start(hook_of: Callable[[], Any]) -> Callable[[], None]:
    def start() -> None:
        hook_of()

    return start


def patches(mode: str) -> dict[str, Callable[[], None]]:
    """Module -> patch, for a TF2 worker in `mode` (`run`, `capture`, or `profile`, which refuses
    a TF2 script at its first apply)."""
    hook_of = {"run": _run_hook, "capture": _capture_hook, "profile": _profile_hook}[mode]
    found: dict[str, Callable[[], None]] = {
        "tensorflow": _start(hook_of),
        "keras.src.optimizers.base_optimizer": _installer(hook_of, "hook_keras3"),
        "tf_keras.src.optimizers.optimizer": _installer(hook_of, "hook_tf_keras"),
        "tf_keras.src.optimizers.legacy.optimizer_v2": _installer(hook_of, "hook_tf_keras_legacy"),
    }
    return found
