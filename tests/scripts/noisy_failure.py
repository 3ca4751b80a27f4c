"""A graph-mode script that fails after TensorFlow has said a lot: the root-cause test's script
(tests/integration/test_failures.py).

Like many tf.compat.v1 scripts it calls deprecated APIs while it builds its graph, so TensorFlow
logs deprecation warnings with their instructions on top of its start-up lines; then it trains,
prints each step on stdout, and worker `--fail-on` raises at step `--fail-at`. What a person needs
from such a run is the traceback and the last steps, not TensorFlow's chatter.
"""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--fail-on", type=int, default=1, help="this worker raises ...")
parser.add_argument("--fail-at", type=int, default=2, help="... before this step (0: before its Session)")
args = parser.parse_args()

worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
x = tf1.placeholder(tf.float32, [None, 2], name="x")
y = tf1.placeholder(tf.float32, [None, 1], name="y")
w = tf1.get_variable("w", [2, 1], initializer=tf1.zeros_initializer())
loss = tf.reduce_mean(tf.square(tf.matmul(tf1.to_float(x), w) - y))  # to_float: deprecated
train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
if worker == args.fail_on and args.fail_at == 0:
    raise ValueError(f"worker {worker}: no data to train on")
init = tf1.initialize_all_variables()  # deprecated

with tf1.Session() as sess:
    sess.run(init)
    for step in range(1, args.steps + 1):
        if worker == args.fail_on and step == args.fail_at:
            raise ValueError(f"worker {worker}: batch {step} has no labels")
        sess.run(train_op, {x: np.ones((4, 2), np.float32), y: np.ones((4, 1), np.float32)})
        print(f"step {step}", flush=True)
