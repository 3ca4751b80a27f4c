"""The tf_keras (TF_USE_LEGACY_KERAS=1) counterpart of tf2around_saving.py, run as one worker of a
2-worker TF2 job with around.py's installers on the import hook.

    TF_USE_LEGACY_KERAS=1 python tf2around_saving_tf_keras.py OUT TASK_INDEX train|resume

train: fit to epoch 4 with BackupAndRestore (a CheckpointManager underneath) and two
ModelCheckpoints (.h5, TF-format weights), interrupted at the start of epoch 3; then model.save
and save_weights (and a load back). resume: the same fit, which must restore the chief's backup.
Prints one JSON line.
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

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
assert keras.__name__.startswith("tf_keras"), keras.__name__
tf.random.set_seed(1 + index)  # a non-chief's own initial values differ from the chief's
x = np.linspace(-1, 1, 32, dtype="float32").reshape(16, 2)
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
model.compile(keras.optimizers.SGD(0.1), "mse")
report = {}


def weights(m):
    return [w.tolist() for w in m.get_weights()]


class Record(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        report["weights_at_begin"] = weights(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        if phase == "train" and epoch == 2:
            raise RuntimeError("interrupted")


callbacks = [keras.callbacks.BackupAndRestore(f"{out}/backup"), Record()]
if phase == "train":
    callbacks += [keras.callbacks.ModelCheckpoint(f"{out}/checkpoints/e{{epoch}}.h5"),
                  keras.callbacks.ModelCheckpoint(f"{out}/weights/e{{epoch}}", save_weights_only=True)]
try:
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=callbacks)
    report["epochs_run"] = len(history.history["loss"])
except RuntimeError:
    model.save(f"{out}/model.keras")
    model.save_weights(f"{out}/final.weights.h5")
    report["reloaded_equal"] = weights(keras.models.load_model(f"{out}/model.keras")) == weights(model)
report["final_weights"] = weights(model)
if chief_only._scratch:
    mirrored = os.path.join(chief_only._scratch, out.lstrip("/"))
    report["scratch_files"] = sorted(os.path.relpath(os.path.join(d, f), mirrored)
                                     for d, _, files in os.walk(mirrored) for f in files)
print(json.dumps(report))
