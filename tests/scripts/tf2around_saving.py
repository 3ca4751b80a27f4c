"""A Keras 3 script that writes through every save API chief_only.py covers, run as one worker of
a 2-worker TF2 job with around.py's installers on the import hook (no launcher, no collectives).

    python tf2around_saving.py OUT TASK_INDEX train|resume

train: fit 2 epochs with ModelCheckpoint and BackupAndRestore (its backup kept), then model.save
and save_weights (and a load back), tf.train.Checkpoint write/save, a CheckpointManager, a summary
writer and a TensorBoard callback's writer, all under OUT. resume: fit to epoch 3 with
BackupAndRestore on OUT/backup (deleting it at the end), and restore a CheckpointManager on
OUT/manager. Prints one JSON line.
"""

import functools
import json
import os
import sys

from adrun.runtime import import_hook
from adrun.runtime.context import TaskContext
from adrun.runtime.tf2 import chief_only
from adrun.runtime.tf2.around import AROUND_PATCHES

out, index, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctx = TaskContext(mode="run", role="worker", task_index=index, num_workers=2, job_id="t", cluster={},
                  strategy_file=None, capture_out=None)
sys.meta_path.insert(0, import_hook._PostImportFinder(
    {name: functools.partial(install, ctx) for name, install in AROUND_PATCHES.items()}))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras.utils.set_random_seed(1 + index)  # a non-chief's own initial values differ from the chief's
x = np.linspace(-1, 1, 32, dtype="float32").reshape(16, 2)
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
model.compile(keras.optimizers.SGD(0.1), "mse")
report = {}


def weights(m):
    return [w.tolist() for w in m.get_weights()]


class AtTrainBegin(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        report["weights_at_begin"] = weights(self.model)


# kept after the first fit for the resume; deleted at the end of the resumed fit (by the chief only)
backup = keras.callbacks.BackupAndRestore(f"{out}/backup", delete_checkpoint=phase == "resume")
if phase == "train":
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[
        keras.callbacks.ModelCheckpoint(f"{out}/checkpoints/e{{epoch}}.keras"),
        keras.callbacks.ModelCheckpoint(f"{out}/checkpoints/e{{epoch}}.weights.h5", save_weights_only=True),
        backup,
    ])
    model.save(f"{out}/model.keras")
    model.save_weights(f"{out}/final.weights.h5")
    report["reloaded_equal"] = weights(keras.models.load_model(f"{out}/model.keras")) == weights(model)
    step = tf.Variable(7)
    checkpoint = tf.train.Checkpoint(step=step)
    report["written"] = checkpoint.write(f"{out}/tf/written")
    checkpoint.save(f"{out}/tf/saved")
    manager = tf.train.CheckpointManager(checkpoint, f"{out}/manager", max_to_keep=1)
    manager.save()
    step.assign(8)
    manager.save()  # sweeps the first one: inside this task's own directory on a non-chief
    with tf.summary.create_file_writer(f"{out}/summaries").as_default():
        tf.summary.write("loss", 1.0, step=0)  # tf.summary.scalar would need the tensorboard package
    board = keras.callbacks.TensorBoard(f"{out}/tensorboard")
    board.set_model(model)
    with board._train_writer.as_default():
        tf.summary.write("loss", 1.0, step=0)
else:
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[backup, AtTrainBegin()])
    step = tf.Variable(0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), f"{out}/manager", max_to_keep=1)
    manager.restore_or_initialize()
    report["restored_step"] = int(step.numpy())
    manager.save()
report["epochs_run"] = len(history.history["loss"])
report["final_weights"] = weights(model)
report["scratch"] = chief_only._scratch
if chief_only._scratch:
    report["scratch_dirs"] = os.listdir(os.path.join(chief_only._scratch, out.lstrip("/")))
print(json.dumps(report))
