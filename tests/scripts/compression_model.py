"""Model for the compression tests (docs/testing.md).

`--model constant`: loss = sum(w * c) where c is drawn per (worker, step), so the gradient is c
whatever w is, and exact synchronous SGD ends at w0 - lr * sum over steps of mean over workers of
c. The script writes the final w; the test computes the exact answer in numpy and compares
compressors' errors against it. With --same-data every worker uses worker 0's constants, so the
sum inside the collective is exact (x + x) and only the compressor's own rounding remains.
`--model regression`: a least-squares problem whose loss is written per step (convergence).
"""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["constant", "regression"], required=True)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--out", required=True)
parser.add_argument("--same-data", action="store_true", help="every worker draws worker 0's constants")
args = parser.parse_args()
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
SHAPE = (64, 48)


def constant_for(w_index: int, step: int) -> np.ndarray:
    return np.random.default_rng(10_000 * w_index + step).normal(scale=1e-2, size=SHAPE).astype(np.float32)


c = tf1.placeholder(tf.float32, SHAPE)
x = tf1.placeholder(tf.float32, [None, SHAPE[0]])
y = tf1.placeholder(tf.float32, [None, SHAPE[1]])
w = tf1.get_variable("w", SHAPE, initializer=tf1.zeros_initializer())
if args.model == "constant":
    loss, lr = tf.reduce_sum(w * c), 1.0
else:
    loss, lr = tf.reduce_mean(tf.square(tf.matmul(x, w) - y)), 0.5
train_op = tf1.train.GradientDescentOptimizer(lr).minimize(loss)

true_w = np.random.default_rng(7).normal(size=SHAPE).astype(np.float32) / 8
rng = np.random.default_rng(100 + worker)
losses = []
with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    for step in range(args.steps):
        if args.model == "constant":
            sess.run(train_op, {c: constant_for(0 if args.same_data else worker, step)})
        else:
            xs = rng.normal(size=(32, SHAPE[0])).astype(np.float32)
            _, value = sess.run([train_op, loss], {x: xs, y: xs @ true_w})
            losses.append(value)
    np.savez(os.path.join(args.out, f"w{worker}.npz"), w=sess.run(w), losses=np.array(losses))
