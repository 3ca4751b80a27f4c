"""Reads one epoch of a tf.data pipeline (64 numbered examples, batches of 4) through a one-shot
iterator and trains on it; writes the example ids this worker saw to OUT/w<index>.npz."""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))

ids = tf.data.Dataset.range(64)
dataset = ids.map(lambda i: (i, tf.fill([3], tf.cast(i, tf.float32) / 64.0))).batch(4)
example_ids, features = tf1.data.make_one_shot_iterator(dataset).get_next()
w = tf1.get_variable("w", [3, 1])
loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - 1.0))
step = tf1.train.get_or_create_global_step()
train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)

seen = []
with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    try:
        while True:
            batch, _ = sess.run([example_ids, train_op])
            seen.extend(batch.tolist())
    except tf.errors.OutOfRangeError:
        pass
    np.savez(os.path.join(args.out, f"w{worker}.npz"), seen=np.array(seen), global_step=sess.run(step))
