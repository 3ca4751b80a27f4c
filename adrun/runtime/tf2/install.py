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
    from adrun.runtime.tf2.profiler import profile_hook

    ctx = current()
    if ctx.capture_out is None:
        raise RuntimeError("a profile-mode task without ADRUN_CAPTURE_OUT: the launcher sets it (capture_run.py)")
    return profile_hook(ctx.profile_warmup, ctx.profile_steps, ctx.capture_out, ctx.capture_answer_fd)


def _run_hook() -> Any:
    global _hook
    if _hook is None:
        from adrun.runtime.metrics import StepReporter
        from adrun.runtime.tf2.steps import StepCounters

        ctx = current()
        reporter = StepReporter.for_worker(ctx)
        if ctx.strategy.uses_ps:
            _hook = _ps_hook(ctx, StepCounters(reporter))
        else:
            from adrun.runtime.tf2.step_deadline import StepDeadline

            timeout_s = ctx.settings.op_timeout_s if ctx.num_workers > 1 else 0.0  # one worker: no collectives
            _hook = _collective_hook(ctx, StepCounters(reporter, StepDeadline(timeout_s)))
    return _hook


def _enter(creator: Any) -> None:
    import tensorflow as tf

    scope = tf.variable_creator_scope(creator)
    scope.__enter__()
    _scopes.append(scope)


def _collective_hook(ctx: Any, steps: Any) -> Any:
    """All-reduce plans: peers joined by TF's collectives, worker 0's initial values broadcast."""
    from adrun.runtime.tf2.broadcast import Broadcaster
    from adrun.runtime.tf2.collective_runtime import routes_of, start_collectives
    from adrun.runtime.tf2.keys import StepKeys
    from adrun.runtime.tf2.reduction import TF2Collectives
    from adrun.runtime.tf2.sync import SynchronizedApply

    keys = routes = None
    if ctx.num_workers > 1:
        from adrun.runtime.tf2.peers import report_collective_failures
        from adrun.runtime.tf2.routes import HOST, Routes

        start_collectives(ctx)
        report_collective_failures(ctx.task_index)
        keys = StepKeys(Routes(ctx.task_index).device(HOST))
        routes = routes_of(ctx)
        _enter(Broadcaster(ctx.task_index, ctx.num_workers, ctx.settings.op_timeout_s, routes))
    collectives = TF2Collectives(ctx.num_workers, keys=keys, routes=routes,
                                 count_slots=sum(var.grad == "sparse" for var in ctx.strategy.variables))
    return SynchronizedApply(ctx, collectives, steps)


def _ps_hook(ctx: Any, steps: Any) -> Any:
    """Parameter-server plans: every worker a client of the PS tasks, the variables shared there."""
    from adrun.runtime.tf2.ps_apply import PSApply
    from adrun.runtime.tf2.ps_cluster import connect_to_ps
    from adrun.runtime.tf2.ps_variables import SharedVariables, ps_tasks_by_name

    connect_to_ps(ctx)
    if any(var.partition is not None for var in ctx.strategy.variables):
        from adrun.runtime.tf2.ps_shards import gradients_of_whole_variables

        gradients_of_whole_variables()
    _enter(SharedVariables(ps_tasks_by_name(ctx.strategy), ctx.is_chief, ctx.task_index, ctx.settings.init_timeout_s))
    return PSApply(ctx, steps)


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
    """Module -> patch, for a TF2 worker in `mode` (`run`, `capture`, or `profile`, which times the
    script's steps at its applies: profiler.py)."""
    hook_of = {"run": _run_hook, "capture": _capture_hook, "profile": _profile_hook}[mode]
    found: dict[str, Callable[[], None]] = {
        "tensorflow": _start(hook_of),
        "keras.src.optimizers.base_optimizer": _installer(hook_of, "hook_keras3"),
        "tf_keras.src.optimizers.optimizer": _installer(hook_of, "hook_tf_keras"),
        "tf_keras.src.optimizers.legacy.optimizer_v2": _installer(hook_of, "hook_tf_keras_legacy"),
        "keras.src.backend.tensorflow.core": _local_variable_patches,
    }
    if mode == "run" and current().strategy.uses_ps:
        found["keras.src.backend.tensorflow.core"] = _ps_variable_patches
        found["keras.src.backend.tensorflow.optimizer"] = _ps_slot_patches
        split = [var.name for var in current().strategy.variables if var.partition is not None]
        if split:
            found["tf_keras"] = _refuse_split_variables(split)
    return found


def _refuse_split_variables(names: list[str]) -> Callable[[], None]:
    """tf_keras under a plan that splits variables over PS tasks: refused when the script imports it.
    Its layers list a ShardedVariable's shards as their weights (ParameterServerStrategy v2's
    design), so `get_weights`, saved models and checkpoints would hold the shards, not the plain
    model's variables (measured: the oracle's weights came back in shard shapes)."""
    def refuse_tf_keras() -> None:
        from adrun.runtime.refusal import refuse

        listed = ", ".join(f"'{name}'" for name in names[:3]) + (", ..." if len(names) > 3 else "")
        refuse(f"the plan splits {listed} over PS tasks, which TF2 mode runs for Keras 3 only: tf_keras lists a "
               "split variable's shards as its weights, so its saved models and checkpoints would not have the "
               "plain model's variables. Use PS or PSLoadBalancing (variables whole), or Keras 3")

    return refuse_tf_keras


def _local_variable_patches() -> None:
    """Keras 3 variables of this worker's own: lookups as row gathers (row_reads.py)."""
    from adrun.runtime.tf2.row_reads import local_row_reads

    local_row_reads()


def _ps_slot_patches() -> None:
    """Keras 3 slots made eagerly, placed or split as their variable (ps_shards.py); updates on
    their variable's PS (ps_updates.py)."""
    from adrun.runtime.tf2.ps_shards import slots_made_like_their_variable
    from adrun.runtime.tf2.ps_updates import updates_on_their_ps

    slots_made_like_their_variable()
    updates_on_their_ps()


def _ps_variable_patches() -> None:
    """Keras 3 variables shared on PS tasks: atomic adds (ps_atomic.py), row gathers (ps_gather.py)."""
    from adrun.runtime.tf2.ps_atomic import atomic_updates
    from adrun.runtime.tf2.ps_gather import row_reads

    atomic_updates()
    row_reads()
