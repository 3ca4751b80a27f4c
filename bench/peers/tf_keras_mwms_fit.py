"""Peer: tf_keras `model.fit` under MultiWorkerMirroredStrategy (TF_USE_LEGACY_KERAS=1), written by hand without adrun.

The Keras 2 way TF's multi-worker tutorial teaches (bench/peers/mwms_fit.py has the body):

    python bench/peers/tf_keras_mwms_fit.py --workload dense_keras --worker-hosts h1:2222,h2:2222 --task-index 0 \\
        --steps 200 --warmup 20 --result-file out/w{worker}.json
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported: tf.keras is tf_keras

import tensorflow as tf  # noqa: E402

from mwms_fit import fit_under_mwms  # noqa: E402

if __name__ == "__main__":
    fit_under_mwms(tf.keras, __doc__.splitlines()[0])
