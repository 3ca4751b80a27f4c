"""Variables that saving and loading make are each worker's own, never broadcast.

Keras 3's saving (`saving_api.save_model`/`save_weights`/`load_*`, which `Model.save*`,
`ModelCheckpoint` and `BackupAndRestore` call) makes throw-away optimizer variables, and a
`tf.train.Checkpoint` makes its `save_counter` at its first save. The broadcaster (broadcast.py)
would give each a collective that the other workers never join, since on them chief-only saving
(chief_only.py) skips or redirects the save: the chief would wait for ever at its first save. None of
these variables is trained, so each worker keeps its own (`broadcast.internal`). Installed on every
worker of a TF2 run with more than one worker.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from adrun.runtime.context import TaskContext


def _unbroadcast(owner: object, name: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def local(*args: Any, **kwargs: Any) -> Any:
        # imported here: broadcast.py imports TensorFlow, which may be half imported at install time
        from adrun.runtime.tf2.broadcast import internal

        with internal():
            return original(*args, **kwargs)

    setattr(owner, name, local)


def _keras_saving(ctx: TaskContext) -> None:
    saving_api = sys.modules["keras.src.saving.saving_api"]
    for name in ("save_model", "save_weights", "load_model", "load_weights"):
        _unbroadcast(saving_api, name)


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
    "keras.src.saving.saving_api": _with_several_workers(_keras_saving),
    "tensorflow.python.checkpoint.checkpoint": _with_several_workers(_tf_checkpoint),
}
