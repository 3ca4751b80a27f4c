"""Profile mode: keep the profiling run's checkpoints and summaries out of the user's directories.

A script profiled for a few steps and then run for real must not find anything the profiling run
wrote: MonitoredTrainingSession(checkpoint_dir=...) and Supervisor restore the latest checkpoint
they find, so a profiling checkpoint would make the real run resume at its step; a TensorBoard
logdir would show a second, short run. So in the profiling process

- `Saver.save` writes nothing (it returns the path it would have written): neither the script's own
  Saver nor the one of a CheckpointSaverHook or Supervisor leaves a checkpoint or `checkpoint` file;
- every events file (v1 `FileWriter`, hence SummaryWriterCache and the hooks' writers, and v2
  `tf.summary.create_file_writer`) and every graph that TF's hooks and Supervisor write with
  `write_graph` goes to a scratch directory the launcher deletes afterwards.

- tf_keras's `Model.save` and `Model.save_weights` (what its ModelCheckpoint callback calls) write
  nothing.

Restoring stays as it is: reading the user's own checkpoint leaves nothing behind. Files the script
writes itself (`open`, `np.save`) are not redirected; most are written at the end of training,
which the profiling process never reaches (it ends after its last step).
"""

from __future__ import annotations

import functools
import itertools
import numbers
import os
from typing import Any

_dirs = itertools.count()


def save_nothing(self, sess, save_path, global_step=None, *args, **kwargs):  # type: ignore[no-untyped-def]
    """In place of `Saver.save`: the path the checkpoint would have had, and no file."""
    from tensorflow.python.training import training_util

    if global_step is None:
        return save_path
    step = global_step if isinstance(global_step, numbers.Integral) else training_util.global_step(sess, global_step)
    return f"{save_path}-{step}"


def keep_writes_in(scratch_dir: str) -> None:
    """Install the redirections above; `scratch_dir` exists and is the launcher's to delete."""
    from tensorflow.python.ops import gen_summary_ops
    from tensorflow.python.summary.writer import event_file_writer
    from tensorflow.python.training import saver as tf_saver
    from tensorflow.python.training import training_util

    def scratch(kind: str) -> str:
        path = os.path.join(scratch_dir, f"{kind}-{next(_dirs)}")
        os.makedirs(path, exist_ok=True)
        return path

    tf_saver.Saver.save = save_nothing

    original_events = event_file_writer.EventFileWriter.__init__

    @functools.wraps(original_events)
    def events_init(self: Any, logdir: str, *args: Any, **kwargs: Any) -> None:
        original_events(self, scratch("events"), *args, **kwargs)

    event_file_writer.EventFileWriter.__init__ = events_init

    original_v2_writer = gen_summary_ops.create_summary_file_writer

    @functools.wraps(original_v2_writer)
    def create_summary_file_writer(writer: Any, logdir: Any, *args: Any, **kwargs: Any) -> Any:
        return original_v2_writer(writer, scratch("summaries"), *args, **kwargs)

    gen_summary_ops.create_summary_file_writer = create_summary_file_writer

    original_write_graph = training_util.write_graph

    @functools.wraps(original_write_graph)
    def write_graph(graph_or_graph_def: Any, logdir: str, name: str, as_text: bool = True) -> Any:
        return original_write_graph(graph_or_graph_def, scratch("graphs"), name, as_text)

    training_util.write_graph = write_graph


def keep_keras_saves_out() -> None:
    """tf_keras models save nothing (installed once its training module is imported)."""
    from tf_keras.src.engine import training

    def save_nothing_of_the_model(self, filepath, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None

    training.Model.save = save_nothing_of_the_model
    training.Model.save_weights = save_nothing_of_the_model
