"""A MonitoredTrainingSession model for the restart tests (tests/integration/test_restarts.py).

Its batches are a function of global_step alone, the same on every worker, and its initial values
are constants: after --steps synchronous steps its variables are those of a plain single-process
run (the equivalence oracle), however often the job was stopped and resumed from a checkpoint in
between, but only if every resumed attempt continues from the step its checkpoint holds.

--checkpoint-dir DIR  MonitoredTrainingSession's checkpoint_dir, saved every --save-every steps
--out DIR             the final variables and global_step -> DIR/values_w<index>.npz
--pause-on W --pause-at K
                      in the first attempt only (ADRUN_RESTART_COUNT=0), worker W, about to run
                      global step K, creates DIR/paused (--out) and sleeps for good: the test then
                      kills something, or lets adrun see a stall
Every worker prints `attempt A starts at global step G` when it first reads global_step.
"""

import argparse
import os
import pathlib
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint-dir", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--save-every", type=int, default=5)
parser.add_argument("--pause-on", type=int, default=-1)
parser.add_argument("--pause-at", type=int, default=-1)
args = parser.parse_args()
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
attempt = os.environ.get("ADRUN_RESTART_COUNT")


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(step)
    return rng.normal(size=(8, 4)).astype(np.float32), rng.normal(size=(8, 3)).astype(np.float32)


x = tf1.placeholder(tf.float32, [None, 4], name="x")
y = tf1.placeholder(tf.float32, [None, 3], name="y")
w = tf1.get_variable("dense/w", initializer=np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3))
b = tf1.get_variable("dense/b", initializer=np.full(3, 0.1, np.float32))
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
global_step = tf1.train.get_or_create_global_step()
train_op = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss, global_step=global_step)

with tf1.train.MonitoredTrainingSession(checkpoint_dir=args.checkpoint_dir, save_checkpoint_steps=args.save_every,
                                        save_summaries_steps=None, save_summaries_secs=None,
                                        log_step_count_steps=None) as sess:
    step = sess.run(global_step)
    print(f"attempt {attempt} starts at global step {step}", flush=True)
    while step < args.steps:
        if attempt == "0" and worker == args.pause_on and step == args.pause_at:
            (pathlib.Path(args.out) / "paused").touch()
            time.sleep(3600)
        features, labels = batch(step)
        sess.run(train_op, {x: features, y: labels})
        step = sess.run(global_step)
    values = dict(zip(["dense/w", "dense/b", "global_step"], sess.run([w, b, global_step])))
np.savez(os.path.join(args.out, f"values_w{worker}.npz"), **values)
print("done", flush=True)
