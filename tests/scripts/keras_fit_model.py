"""tf_keras `Model.fit` in graph mode (docs/testing.md).

Worker w fits its own data in batches of B. With `--reference N` (plain python) one process fits
the N workers' batches interleaved, in batches of N*B: with a mean loss, its gradient per step is
the mean of the workers' gradients, which is what synchronous data-parallel training must apply.
With --batchnorm the batch statistics depend on the batch, so that holds only with --same-data
(the reference then sees each batch N times over, which has the same statistics and gradient).
Writes the final weights to OUT/<w<index>|reference>.npz.
"""

import argparse
import os

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
import tf_keras as keras  # noqa: E402  (graph mode must be set first)

parser = argparse.ArgumentParser()
parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
parser.add_argument("--batchnorm", action="store_true", help="add a BatchNormalization layer")
parser.add_argument("--same-data", action="store_true", help="every worker fits worker 0's data")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--out", required=True)
parser.add_argument("--reference", type=int, default=0)
args = parser.parse_args()
BATCH = 8


def data(w: int):
    rng = np.random.default_rng(w)
    x = rng.normal(size=(BATCH * args.steps, 4)).astype(np.float32)
    return x, (x @ np.array([[1.0], [-1.0], [2.0], [0.5]], np.float32)).astype(np.float32)


layers = [keras.layers.Dense(6, activation="tanh", input_shape=(4,), kernel_initializer=keras.initializers.GlorotUniform(seed=1))]
if args.batchnorm:
    layers.append(keras.layers.BatchNormalization(momentum=0.5))
layers.append(keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=2)))
model = keras.Sequential(layers)
optimizer = keras.optimizers.legacy.SGD(0.1) if args.optimizer == "sgd" else keras.optimizers.legacy.Adam(0.05)
model.compile(optimizer=optimizer, loss="mse")
if args.reference:
    parts = [data(0 if args.same_data else w) for w in range(args.reference)]
    x = np.concatenate([p[0][s * BATCH:(s + 1) * BATCH] for s in range(args.steps) for p in parts])
    y = np.concatenate([p[1][s * BATCH:(s + 1) * BATCH] for s in range(args.steps) for p in parts])
    model.fit(x, y, batch_size=BATCH * args.reference, epochs=1, shuffle=False, verbose=0)
    name = "reference"
else:
    worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
    x, y = data(0 if args.same_data else worker)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    name = f"w{worker}"
np.savez(os.path.join(args.out, f"{name}.npz"), *model.get_weights(), iterations=keras.backend.get_value(optimizer.iterations))
