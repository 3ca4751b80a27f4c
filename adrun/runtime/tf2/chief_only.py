"""TF2 mode: only the chief writes the script's checkpoints, saved models and summaries.

Every worker runs the same script, so without this N processes would write the same files at the
same moments (torn `.keras` zips, an events file per worker in one log dir, and a non-chief's
`CheckpointManager` or `BackupAndRestore` deleting the chief's files). On a non-chief each write
API either goes to a private scratch directory of this task, removed when the process exits, or does
nothing, chosen per API by what a script can observe afterwards:

- Keras 3 and tf_keras `Model.save` / `save_weights` (and the `keras.saving` functions) write into
  the scratch directory, and a later `load_model` / `load_weights` of a path this task saved reads
  that copy. A script that saves and reloads on every worker then reads its own complete file
  instead of racing the chief's half-written one.
- Keras 3 `ModelCheckpoint` saves nothing: its files are for the user to take from the chief's
  directory afterwards, and a copy per epoch (`e{epoch}.keras`) would only fill this worker's disk.
  tf_keras's does what it does under its own multi-worker strategies: writes into the scratch
  directory and deletes it right after (`distributed_file_utils`, below).
- TF `tf.train.Checkpoint.write`/`save` write their prefix into the scratch directory and return
  that path, so `restore(path)` of what was returned reads it back. A `CheckpointManager` reads the
  directory it is given at construction, so `restore_or_initialize()` and `latest_checkpoint`
  resume from the chief's checkpoint, and afterwards writes, records and sweeps only inside the
  scratch directory (it never deletes the chief's files). tf_keras's `BackupAndRestore` rests on
  such a manager and so resumes from the chief's backup too.
- Keras 3 `BackupAndRestore` writes nothing and deletes nothing: its backup is only ever read to
  resume, and after a restart every worker must restore the state the chief saved, not its own. It
  reads the chief's `backup_dir` at the start of `fit`, before this worker's first step; the chief
  cannot write a newer backup before then, since its first step waits for this worker's gradient.
  Where the chief repairs a corrupt backup by copying the previous one over it, a non-chief makes
  that copy in the scratch directory and reads it there.
- Summaries: every TF2 summary file writer (`tf.summary.create_file_writer`, hence Keras 3 and
  tf_keras `TensorBoard`) writes into the scratch directory, and a Keras 3 `TensorBoard`'s whole
  `log_dir` (its projector config and profiler traces too) is moved there. tf_keras's callbacks ask
  `distributed_file_utils.write_dirpath` where to write, as under its own multi-worker strategies,
  and call `remove_temp_dirpath` when done: on a non-chief the first answers with the scratch
  directory and the second deletes it there, as tf_keras does on a non-chief of
  `MultiWorkerMirroredStrategy`.

Resuming after a restart reads the chief's files on every worker, so across hosts the checkpoint
directory must be on storage every host sees (as for any multi-worker TF job).
"""

from __future__ import annotations

import atexit
import copy
import functools
import os
import shutil
import tempfile
from collections.abc import Callable

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.replace import replace_function

_scratch: str | None = None
_saved: dict[str, str] = {}  # path the script asked to save to -> where this task wrote it


def scratch_root(ctx: TaskContext) -> str:
    """This task's scratch directory, made on first use and removed when the process exits; in
    the launcher's scratch directory when it gives one (profile mode, which may end by `os._exit`,
    past atexit: the launcher deletes its directory)."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.mkdtemp(prefix=f"adrun-w{ctx.task_index}-", dir=ctx.scratch_dir)
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def elsewhere(ctx: TaskContext, path: str | os.PathLike) -> str:
    """Where this task writes what the script asked to write at `path`: the same path under the
    scratch directory (its parent made). A path already inside it is returned as is, so a writer
    called through another redirected one is not moved twice."""
    root = scratch_root(ctx)
    text = os.fspath(path)
    if text == root or text.startswith(root + os.sep):
        return text
    local = text.replace("://", os.sep, 1) if "://" in text else os.path.abspath(text)
    target = os.path.join(root, local.lstrip(os.sep))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    return target


def _saved_elsewhere(ctx: TaskContext, path):  # type: ignore[no-untyped-def]
    """`elsewhere`, remembered for reading back; an open file object the script passes is its own."""
    if not isinstance(path, (str, os.PathLike)):
        return path
    target = elsewhere(ctx, path)
    _saved[_key(path)] = target
    return target


def _key(path: str | os.PathLike) -> str:
    text = os.fspath(path)
    return text if "://" in text else os.path.abspath(text)


def _own_copy(path):  # type: ignore[no-untyped-def]
    """What a load of `path` reads: this task's copy if it saved one there, else `path` itself."""
    if isinstance(path, (str, os.PathLike)):
        return _saved.get(_key(path), path)
    return path


def _redirect_saving_api(ctx: TaskContext, saving_api) -> None:  # type: ignore[no-untyped-def]
    """Keras 3 and tf_keras share the shape of `saving_api`: (model, filepath, ...) for saving,
    `load_model(filepath, ...)` and `load_weights(model, filepath, ...)` for reading back."""
    for name in ("save_model", "save_weights"):
        replace_function(saving_api, name, lambda original: lambda model, filepath, *args, **kwargs: original(
            model, _saved_elsewhere(ctx, filepath), *args, **kwargs))
    replace_function(saving_api, "load_model", lambda original: lambda filepath, *args, **kwargs: original(
        _own_copy(filepath), *args, **kwargs))
    replace_function(saving_api, "load_weights", lambda original: lambda model, filepath, *args, **kwargs: original(
        model, _own_copy(filepath), *args, **kwargs))


def _keras_saving(ctx: TaskContext) -> None:
    from keras.src.saving import saving_api

    _redirect_saving_api(ctx, saving_api)


def _tf_keras_saving(ctx: TaskContext) -> None:
    from tf_keras.src.saving import saving_api

    _redirect_saving_api(ctx, saving_api)


def _keras_backup_and_restore(ctx: TaskContext) -> None:
    from keras.src.callbacks.backup_and_restore import BackupAndRestore
    from keras.src.utils import file_utils

    def on_train_begin(self, logs=None):  # type: ignore[no-untyped-def]
        try:
            self._load_model()
        except OSError:
            if not file_utils.exists(self._prev_weights_path):
                raise
            previous = copy.copy(self)  # the chief's repair, done on copies in the scratch directory
            previous._weights_path = elsewhere(ctx, self._weights_path)
            previous._training_metadata_path = elsewhere(ctx, self._training_metadata_path)
            file_utils.copy(self._prev_weights_path, previous._weights_path)
            if file_utils.exists(self._prev_training_metadata_path):
                file_utils.copy(self._prev_training_metadata_path, previous._training_metadata_path)
            elif file_utils.exists(previous._training_metadata_path):
                file_utils.remove(previous._training_metadata_path)
            previous._load_model()

    BackupAndRestore.on_train_begin = on_train_begin
    BackupAndRestore._save_model = lambda self: None
    BackupAndRestore.on_train_end = lambda self, logs=None: None


def _keras_model_checkpoint(ctx: TaskContext) -> None:
    from keras.src.callbacks.model_checkpoint import ModelCheckpoint

    ModelCheckpoint._save_model = lambda self, epoch, batch, logs: None


def _keras_tensorboard(ctx: TaskContext) -> None:
    from keras.src.callbacks.tensorboard import TensorBoard

    def make(original):  # type: ignore[no-untyped-def]
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            original(self, *args, **kwargs)
            self.log_dir = elsewhere(ctx, self.log_dir)
        return __init__

    replace_function(TensorBoard, "__init__", make)


def _summary_writers(ctx: TaskContext) -> None:
    from tensorflow.python.ops import gen_summary_ops

    replace_function(gen_summary_ops, "create_summary_file_writer",
                     lambda original: lambda writer, logdir, *args, **kwargs: original(
                         writer, _tensor_path(ctx, logdir), *args, **kwargs))


def _tensor_path(ctx: TaskContext, logdir):  # type: ignore[no-untyped-def]
    """A summary writer's `logdir` is a Python string or an eager string tensor; a symbolic one
    (a writer created inside a tf.function) has no value to move and is left alone."""
    if isinstance(logdir, (str, os.PathLike)):
        return elsewhere(ctx, logdir)
    if hasattr(logdir, "numpy"):
        try:
            return elsewhere(ctx, logdir.numpy().decode())
        except (AttributeError, TypeError, ValueError):
            return logdir
    return logdir


def _tf_keras_file_utils(ctx: TaskContext) -> None:
    from tf_keras.src.distribute import distributed_file_utils

    replace_function(distributed_file_utils, "write_dirpath",
                     lambda original: lambda dirpath, strategy: elsewhere(ctx, dirpath))
    replace_function(distributed_file_utils, "remove_temp_dirpath",
                     lambda original: lambda dirpath, strategy: shutil.rmtree(elsewhere(ctx, dirpath), ignore_errors=True))


def _tf_checkpoint(ctx: TaskContext) -> None:
    from tensorflow.python.checkpoint import checkpoint

    replace_function(checkpoint.Checkpoint, "_write",
                     lambda original: lambda self, file_prefix, *args, **kwargs: original(
                         self, elsewhere(ctx, file_prefix), *args, **kwargs))


def _tf_checkpoint_manager(ctx: TaskContext) -> None:
    from tensorflow.python.checkpoint import checkpoint_management

    def make(original):  # type: ignore[no-untyped-def]
        def __init__(self, checkpoint, directory, *args, **kwargs):  # type: ignore[no-untyped-def]
            original(self, checkpoint, directory, *args, **kwargs)  # reads the chief's state
            self._directory = elsewhere(ctx, self._directory)
            self._checkpoint_prefix = elsewhere(ctx, self._checkpoint_prefix)
            self._maybe_delete.clear()  # the chief's checkpoints are the chief's to sweep
        return __init__

    replace_function(checkpoint_management.CheckpointManager, "__init__", make)


def _on_non_chief(install: Callable[[TaskContext], None]) -> Callable[[TaskContext], None]:
    @functools.wraps(install)
    def installer(ctx: TaskContext) -> None:
        if ctx.role == "worker" and not ctx.is_chief:
            install(ctx)
    return installer


# module -> what moves its writes into the scratch directory (or drops them), as on a non-chief
WRITES: dict[str, Callable[[TaskContext], None]] = {
    "keras.src.saving.saving_api": _keras_saving,
    "keras.src.callbacks.backup_and_restore": _keras_backup_and_restore,
    "keras.src.callbacks.model_checkpoint": _keras_model_checkpoint,
    "keras.src.callbacks.tensorboard": _keras_tensorboard,
    "tf_keras.src.saving.saving_api": _tf_keras_saving,
    "tf_keras.src.distribute.distributed_file_utils": _tf_keras_file_utils,
    "tensorflow.python.ops.gen_summary_ops": _summary_writers,
    "tensorflow.python.checkpoint.checkpoint": _tf_checkpoint,
    "tensorflow.python.checkpoint.checkpoint_management": _tf_checkpoint_manager,
}

# module -> installer, run right after the module is imported in a TF2 run-mode task
PATCHES: dict[str, Callable[[TaskContext], None]] = {module: _on_non_chief(install) for module, install in WRITES.items()}
