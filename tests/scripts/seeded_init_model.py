"""A seeded script for the same-start check (docs/testing.md): writes worker 0's initial variables
(partitioned ones reassembled by their slice offsets) and the first value of a random op the
script creates after them, to OUT/<plain|w0>.npz, before any training step."""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
tf1.set_random_seed(5)

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()

x = tf1.placeholder(tf.float32, [None, 4])
ids = tf1.placeholder(tf.int64, [None])
emb = tf1.get_variable("emb", [10, 4])  # the default initializer (glorot uniform)
w = tf1.get_variable("w", [4, 3], initializer=tf1.truncated_normal_initializer(stddev=0.5))
noise = tf.random.uniform([3])  # created after the variables: its seed must not move
loss = tf.reduce_mean(tf.square(tf.matmul(x + tf.nn.embedding_lookup(emb, ids), w) + noise))
train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)

with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    values = {"noise": sess.run(noise)}
    for v in tf1.trainable_variables():
        info = getattr(v, "_save_slice_info", None)
        if info is None:
            values[v.op.name] = sess.run(v)
            continue
        full = values.setdefault(info.full_name, np.zeros(info.full_shape, np.float32))
        full[tuple(slice(o, o + n) for o, n in zip(info.var_offset, info.var_shape))] = sess.run(v)
    worker = os.environ.get("ADRUN_WORKER_INDEX")
    if worker in (None, "0"):
        np.savez(os.path.join(args.out, "plain.npz" if worker is None else "w0.npz"), **values)
    # one step, so adrun sees training; rows 1 and 2 only, so with `emb` in two shards no worker
    # touches the second one (an all-gather of empty gradients must not crash)
    sess.run(train, {x: np.ones((2, 4), np.float32), ids: [1, 2]})
