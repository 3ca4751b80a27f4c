"""Checkpoint round trips (docs/testing.md): train under adrun and save, then restore elsewhere.

--save DIR      train --steps steps, save with the script's own Saver into DIR/w<index> (or
                MonitoredTrainingSession checkpoint_dir DIR with --mts), write the final values to
                DIR/values_w<index>.npz
--restore DIR   restore the latest checkpoint of DIR, run --steps steps with learning rate 0 (so
                every worker has taken a step: replicas hold the chief's state) and write the
                trainable values and global_step to OUT/values_w<index>.npz
Plain `python` with --restore is the single-process check: the checkpoint must load into the
original, undistributed graph.
"""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--save")
parser.add_argument("--restore")
parser.add_argument("--out")
parser.add_argument("--mts", action="store_true")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
lr = 0.0 if args.restore else 0.5

rng = np.random.default_rng(worker)
ids = tf1.placeholder(tf.int64, [None, 2])
y = tf1.placeholder(tf.float32, [None, 1])
emb = tf1.get_variable("emb", [30, 4])
w = tf1.get_variable("dense/w", [4, 1])
pred = tf.matmul(tf.reduce_mean(tf.nn.embedding_lookup(emb, ids), axis=1), w)
loss = tf.reduce_mean(tf.square(pred - y))
step = tf1.train.get_or_create_global_step()
train_op = tf1.train.AdagradOptimizer(lr).minimize(loss, global_step=step)
everything = tf1.global_variables()  # includes the Adagrad slots and global_step


def feed():
    return {ids: rng.integers(0, 30, size=(8, 2)), y: rng.normal(size=(8, 1)).astype(np.float32)}


def dump(sess, directory):
    # after a restore-and-step the optimizer slots have moved (lr 0 still accumulates): keep to
    # the model's variables and the step
    moved = args.restore and args.steps
    kept = [v for v in everything if not moved or v in tf1.trainable_variables() or v is step]
    values = dict(zip([v.op.name for v in kept], sess.run(kept)))
    np.savez(os.path.join(directory, f"values_w{worker}.npz"), **values)


if args.mts:
    with tf1.train.MonitoredTrainingSession(checkpoint_dir=args.save or args.restore, save_checkpoint_steps=1000) as sess:
        for _ in range(args.steps):
            sess.run(train_op, feed())
        dump(sess, args.out or args.save)
else:
    saver = tf1.train.Saver()
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        if args.restore:
            saver.restore(sess, tf1.train.latest_checkpoint(os.path.join(args.restore, "w0")))
        for _ in range(args.steps):
            sess.run(train_op, feed())
        if args.save:
            # every worker asks to save into its own folder: only the chief's may get files
            own = os.path.join(args.save, f"w{worker}")
            os.makedirs(own, exist_ok=True)
            saver.save(sess, os.path.join(own, "model.ckpt"), global_step=step)
        dump(sess, args.out or args.save)
