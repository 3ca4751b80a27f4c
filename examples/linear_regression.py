"""Linear regression with placeholders and a tf.compat.v1 optimizer (graph mode).

Runs unchanged with `python examples/linear_regression.py` or under adrun. Each worker reads its
own slice of the data when ADRUN_WORKER_INDEX / ADRUN_NUM_WORKERS are set (like rank / world size).
"""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()

rank = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
rng = np.random.default_rng(1234 + rank)
true_w = np.arange(1, 9, dtype=np.float32).reshape(8, 1) / 4.0

x = tf1.placeholder(tf.float32, [None, 8], name="x")
y = tf1.placeholder(tf.float32, [None, 1], name="y")
w = tf1.get_variable("w", [8, 1], initializer=tf1.zeros_initializer())
b = tf1.get_variable("b", [1], initializer=tf1.zeros_initializer())
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
global_step = tf1.train.get_or_create_global_step()
train_op = tf1.train.GradientDescentOptimizer(args.lr).minimize(loss, global_step=global_step)

with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    for step in range(args.steps):
        xs = rng.normal(size=(args.batch_size, 8)).astype(np.float32)
        ys = xs @ true_w + 0.5 + 0.01 * rng.normal(size=(args.batch_size, 1)).astype(np.float32)
        _, l = sess.run([train_op, loss], {x: xs, y: ys})
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {sess.run(global_step)} loss {l:.5f}")
    print("final w:", np.round(sess.run(w).ravel(), 3), "b:", np.round(sess.run(b), 3))
