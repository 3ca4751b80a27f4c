"""Variables that saving and loading make are each worker's own, never broadcast.

Keras 3's saving (`saving_api.save_model`/`save_weights`/`load_*`, which `Model.save*`,
`ModelCheckpoint` and `BackupAndRestore` call) makes throw-away optimizer variables, a `load_model`
of Keras 3 or tf_keras makes a whole model, and a `tf.train.Checkpoint` makes its `save_counter` at
its first save. The broadcaster (broadcast.py) would give each a collective that the other workers
never join when they do not make the same call: chief-only saving (chief_only.py) skips Keras 3's
`ModelCheckpoint` on them, and a script may save or load on its chief alone (`if worker == 0:`, as
Horovod scripts do); the chief would wait for ever at that call. None of these variables is
trained, so each worker keeps its own (`broadcast.internal`). tf_keras's saving makes no variable
but `load_model`'s; its `saving_api` is wrapped as Keras 3's is, so that both behave alike.
Installed on every worker of a TF2 run with more than one worker.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.replace import replace_function


def _unbroadcast(owner: ModuleType | type, name: str) -> None:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def local(*args: Any, **kwargs: Any) -> Any:
            # imported here: broadcast.py imports TensorFlow, which may be half imported at install time
            from adrun.runtime.tf2.broadcast import internal

            with internal():
                return original(*args, **kwargs)
        return local

    replace_function(owner, name, make)


def _saving_api(module_name: str) -> Callable[[TaskContext], None]:
    """Installer for a `saving_api` module (Keras 3's or tf_keras's: the same four functions)."""
    def install(ctx: TaskContext) -> None:
        saving_api = sys.modules[module_name]
        for name in ("save_model", "save_weights", "load_model", "load_weights"):
            _unbroadcast(saving_api, name)
    return install


def _tf_checkpoint(ctx: TaskContext) -> None:
    from tensorflow.python.checkpoint.checkpoint import Checkpoint

    _unbroadcast(Checkpoint, "_maybe_create_save_counter")


def _with_several_workers(install: Callable[[TaskContext], None]) -> Callable[[TaskContext], None]:
    @functools.wraps(install)
    def installer(ctx: TaskContext) -> None:
        if ctx.num_workers > 1:
            install(ctx)
    return installer


# module -> installer, run right after the module is imported in a TF2 run-mode task
PATCHES: dict[str, Callable[[TaskContext], None]] = {
    "keras.src.saving.saving_api": _with_several_workers(_saving_api("keras.src.saving.saving_api")),
    "tf_keras.src.saving.saving_api": _with_several_workers(_saving_api("tf_keras.src.saving.saving_api")),
    "tensorflow.python.checkpoint.checkpoint": _with_several_workers(_tf_checkpoint),
}
