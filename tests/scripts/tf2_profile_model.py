"""A TF2 script for the profiling run's tests (tests/integration/test_tf2_profile.py).

Keras 3, trained by `fit`, a `tf.function` loop or an eager loop (`--kind`). With an Embedding of
VOCAB rows (sparse gradients), every batch of BATCH x IDS ids names exactly `--distinct` rows, the
first ones, so the distinct rows per step are known; `--dense` trains a Dense layer on floats
instead. `--save DIR` (fit): ModelCheckpoint, BackupAndRestore and a final `model.save` under DIR,
which a profiling run must leave empty.
"""

import argparse
import os

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--kind", choices=["fit", "loop-function", "loop-eager"], default="fit")
parser.add_argument("--steps", type=int, default=1000, help="steps per epoch")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--distinct", type=int, default=5)
parser.add_argument("--dense", action="store_true")
parser.add_argument("--save")
args = parser.parse_args()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, IDS, VOCAB, FEATURES = 8, 4, 100, 4
keras.utils.set_random_seed(1)
if args.dense:
    one = np.random.default_rng(0).normal(size=(BATCH, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
else:
    one = (np.arange(BATCH * IDS) % args.distinct).reshape(BATCH, IDS).astype(np.int32)
    model = keras.Sequential([keras.Input((IDS,), dtype="int32"), keras.layers.Embedding(VOCAB, 4),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
x = np.tile(one, (args.steps, 1))
y = np.random.default_rng(1).normal(size=(len(x), 1)).astype(np.float32)
optimizer = keras.optimizers.SGD(0.01)

if args.kind == "fit":
    model.compile(optimizer=optimizer, loss="mse")
    callbacks = []
    if args.save:
        callbacks = [keras.callbacks.ModelCheckpoint(os.path.join(args.save, "e{epoch}.keras")),
                     keras.callbacks.BackupAndRestore(os.path.join(args.save, "backup"))]
    model.fit(x, y, batch_size=BATCH, epochs=args.epochs, shuffle=False, verbose=0, callbacks=callbacks)
    if args.save:
        model.save(os.path.join(args.save, "final.keras"))
else:
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    if args.kind == "loop-function":
        step = tf.function(step)
    for _ in range(args.epochs):
        for k in range(args.steps):
            step(tf.constant(x[k * BATCH:(k + 1) * BATCH]), tf.constant(y[k * BATCH:(k + 1) * BATCH]))
