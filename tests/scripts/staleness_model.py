"""Measures how far each worker runs ahead (docs/testing.md, staleness).

Every worker owns a progress counter variable (shared on the PS like any model state); it counts
its steps before each update (control dependency), and after each step it reads all counters and
records its lead over the slowest worker. Worker 1 sleeps between steps, so without a bound the
others run far ahead. Writes OUT/w<index>.npz with the leads, the loss curve and global_step.
"""

import argparse
import os
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--slow", type=float, default=0.3, help="seconds worker 1 sleeps per step")
parser.add_argument("--out", required=True)
args = parser.parse_args()
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
workers = int(os.environ.get("ADRUN_NUM_WORKERS", "1"))

counters = [tf1.get_variable(f"progress/w{i}", [], tf.int64, tf1.zeros_initializer(), trainable=False) for i in range(workers)]
x = tf1.placeholder(tf.float32, [None, 4])
y = tf1.placeholder(tf.float32, [None, 1])
w = tf1.get_variable("w", [4, 1], initializer=tf1.zeros_initializer())
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
step = tf1.train.get_or_create_global_step()
with tf1.control_dependencies([counters[worker].assign_add(1)]):
    train_op = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=step)

rng = np.random.default_rng(worker)
true_w = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
leads, losses = [], []
with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    for _ in range(args.steps):
        xs = rng.normal(size=(16, 4)).astype(np.float32)
        _, value = sess.run([train_op, loss], {x: xs, y: xs @ true_w})
        progress = sess.run(counters)
        leads.append(progress[worker] - min(progress))
        losses.append(value)
        if worker == 1:
            time.sleep(args.slow)
    np.savez(os.path.join(args.out, f"w{worker}.npz"), leads=np.array(leads), losses=np.array(losses))
    print(f"worker {worker}: max lead {max(leads)}")
