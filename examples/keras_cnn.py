"""A small CNN built from Keras layers, fed by tf.data (synthetic images), trained in graph mode
with a tf.compat.v1 optimizer and a MonitoredTrainingSession.

Runs unchanged with `python examples/keras_cnn.py` or under adrun.
"""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

rank = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
rng = np.random.default_rng(7 + rank)
labels = rng.integers(0, 10, size=1024)
# class-dependent mean so there is something to learn
images = (rng.normal(size=(1024, 16, 16, 1)) + labels[:, None, None, None] / 5.0).astype(np.float32)

dataset = tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int64))).repeat().batch(args.batch_size, drop_remainder=True)
features, targets = tf1.data.make_one_shot_iterator(dataset).get_next()

layers = tf.keras.layers
hidden = layers.Conv2D(8, 3, activation="relu")(features)
hidden = layers.MaxPooling2D()(hidden)
hidden = layers.Flatten()(hidden)
logits = layers.Dense(10)(hidden)
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits))
global_step = tf1.train.get_or_create_global_step()
train_op = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss, global_step=global_step)

with tf1.train.MonitoredTrainingSession(hooks=[tf1.train.StopAtStepHook(last_step=args.steps)]) as sess:
    while not sess.should_stop():
        _, step, value = sess.run([train_op, global_step, loss])
        if step % 20 == 0:
            print(f"step {step} loss {value:.4f}")
