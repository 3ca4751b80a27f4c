"""Keras 3 fit on rows 0..10 (11 rows), run as worker INDEX of N with --shard-data, around.py's
installers on the import hook (no launcher, no collectives); records which rows each training and
validation batch held.

    python tf2around_sharding.py N INDEX

Prints one JSON line: for "arrays" (numpy x, y, sample_weight, with validation_data) and "dataset"
(a batched tf.data.Dataset), the rows of each training step per epoch and the validation rows seen.
"""

import functools
import json
import sys

from adrun.env_vars import Settings
from adrun.runtime import import_hook
from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.around import AROUND_PATCHES

num_workers, index = int(sys.argv[1]), int(sys.argv[2])
ctx = TaskContext(mode="run", role="worker", task_index=index, num_workers=num_workers, job_id="t", cluster={},
                  strategy_file=None, capture_out=None, settings=Settings(shard_data=True))
sys.meta_path.insert(0, import_hook._PostImportFinder(
    {name: functools.partial(install, ctx) for name, install in AROUND_PATCHES.items()}))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

seen = {"train": [], "validation": []}


class Record(keras.layers.Layer):
    """Passes its input through and notes the row ids (column 0) of each eager batch."""

    def call(self, inputs, training=None):
        if hasattr(inputs, "numpy"):
            seen["train" if training else "validation"].append([int(r) for r in inputs.numpy()[:, 0]])
        return inputs


def run(fit_input: dict) -> dict:
    seen["train"].clear()
    seen["validation"].clear()
    steps = []
    model = keras.Sequential([keras.Input((1,)), Record(), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse", run_eagerly=True)
    epoch_steps = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: steps.append(0),
        on_train_batch_end=lambda batch, logs: steps.__setitem__(-1, steps[-1] + 1))
    model.fit(**fit_input, epochs=2, verbose=0, shuffle=False, callbacks=[epoch_steps])
    return {"train": list(seen["train"]), "validation": sorted(r for b in seen["validation"] for r in b),
            "steps_per_epoch": steps}


rows = np.arange(11, dtype="float32").reshape(11, 1)
report = {
    "arrays": run({"x": rows, "y": rows, "sample_weight": np.ones(11, "float32"), "batch_size": 2,
                   "validation_data": (rows[:5], rows[:5])}),
    "dataset": run({"x": tf.data.Dataset.from_tensor_slices((rows, rows)).batch(2)}),
}
print(json.dumps(report))
