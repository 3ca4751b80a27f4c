"""Read back what worker 0 of tests/scripts/tf2_model.py saved with `--save SAVE` (a Keras 3 fit
kind, or a tf_keras one with TF_USE_LEGACY_KERAS=1), as a plain process: SAVE/model-w0.keras, the last epoch's SAVE/ckpt-w0/e<N>.weights.h5 and
SAVE/manager-w0's latest checkpoint, each restored into a model; writes their weights to
OUT/model.npz, OUT/epoch.npz and OUT/manager.npz.

    python tf2_load_saved.py SAVE OUT
"""

import os
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    import tf_keras as keras
else:
    import keras

save, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
model = keras.models.load_model(save / "model-w0.keras")
np.savez(out / "model.npz", *model.get_weights())

last = max((save / "ckpt-w0").glob("e*.weights.h5"), key=lambda p: int(p.name[1:].split(".")[0]))
from_epoch = keras.models.clone_model(model)
from_epoch.load_weights(last)
np.savez(out / "epoch.npz", *from_epoch.get_weights())

from_manager = keras.models.clone_model(model)
latest = tf.train.latest_checkpoint(os.fspath(save / "manager-w0"))
tf.train.Checkpoint(model=from_manager).restore(latest).expect_partial()
np.savez(out / "manager.npz", *from_manager.get_weights())
print(f"loaded {last.name} and {Path(latest).name}")
