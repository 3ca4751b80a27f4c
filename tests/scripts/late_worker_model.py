"""A worker that starts training after the chief has ended (docs/testing.md, asynchronous PS).

Under an asynchronous plan the chief waits for no one, so on a busy machine it can finish and exit
before a slower worker has even created its Session. Here that order is forced: the chief trains
one pass over the batches, writes its pid and exits; worker 1 builds the same graph, creates its
Session only once the chief's process is gone, and trains one pass on from the chief's result.
The passes do not overlap, so worker 1 ends where a plain run of two passes (`--passes 2`) ends.
Writes OUT/w<index>.npz with the variables, global_step and the losses.
"""

import argparse
import os
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5, help="batches in one pass")
parser.add_argument("--passes", type=int, default=1)
parser.add_argument("--out", required=True)
args = parser.parse_args()
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
chief_pid = os.path.join(args.out, "chief.pid")

x = tf1.placeholder(tf.float32, [None, 4])
y = tf1.placeholder(tf.float32, [None, 1])
w = tf1.get_variable("w", [4, 1], initializer=tf1.zeros_initializer())
b = tf1.get_variable("b", [1], initializer=tf1.zeros_initializer())
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
step = tf1.train.get_or_create_global_step()
train_op = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=step)

rng = np.random.default_rng(0)
true_w = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
batches = [rng.normal(size=(16, 4)).astype(np.float32) for _ in range(args.steps)]


def chief_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if worker != 0:
    for _ in range(1200):  # at most 2 minutes
        if os.path.exists(chief_pid) and not chief_alive(int(open(chief_pid).read())):
            break
        time.sleep(0.1)
    else:
        raise SystemExit(f"worker {worker}: the chief did not end within 2 minutes")

losses = []
with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    for _ in range(args.passes):
        for xs in batches:
            _, value = sess.run([train_op, loss], {x: xs, y: xs @ true_w + 0.5})
            losses.append(value)
    values = sess.run({"w": w, "b": b, "global_step": step})
np.savez(os.path.join(args.out, f"w{worker}.npz"), losses=np.array(losses), **values)
print(f"worker {worker}: global_step {values['global_step']}")
if worker == 0:  # the last thing the chief does; written whole, so a reader never sees half a pid
    with open(chief_pid + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(chief_pid + ".tmp", chief_pid)
