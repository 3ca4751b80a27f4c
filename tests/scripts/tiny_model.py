"""A tiny graph-mode model for the launcher's behaviour tests (tests/integration/test_cli_errors.py,
test_failures.py). Flags choose how it misbehaves; without any it just trains `--steps` steps.

`--watch-w0-at` checks the finish barrier of bounded runs (tests/integration/test_bounded_recorded_runs.py).
Every line it prints on stdout starts with a word the tests look for (`env`, `pid`, `marker`, `step`,
`failing-at`, `done`), prefixed by adrun with the worker's tag.
"""

import argparse
import json
import os
import socket
import sys
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep after each step")
parser.add_argument("--print-env", action="store_true", help="print the env contract's variables")
parser.add_argument("--print-marker", action="store_true", help="print $TEST_SITECUSTOMIZE_MARKER")
parser.add_argument("--print-pid", action="store_true", help="print this process's pid")
parser.add_argument("--print-modules", action="store_true",
                    help="at the end, print which sitecustomize was loaded and which adrun modules")
parser.add_argument("--no-train", action="store_true", help="build a graph and a Session, but no optimizer")
parser.add_argument("--session", choices=["after-model", "first", "before-optimizer"], default="after-model",
                    help="when the Session is created: after the whole graph, before it, or before the optimizer")
parser.add_argument("--extra-var-on", type=int, default=-1, help="this worker builds an extra variable")
parser.add_argument("--fail-on", type=int, default=-1, help="this worker misbehaves ...")
parser.add_argument("--fail-at", type=int, default=0, help="... after this many steps ...")
parser.add_argument("--fail-how", choices=["raise", "sigkill", "exit3"], default="raise", help="... this way")
parser.add_argument("--watch-w0-at", type=int, default=0,
                    help="in its step N, after the step's collectives, worker 1 connects to worker 0's server "
                         "for 3 s: a worker that left after its last step would refuse it (the finish barrier)")
args = parser.parse_args()

worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))

if args.print_pid:
    print("pid", os.getpid(), flush=True)
if args.print_marker:
    print("marker", os.environ.get("TEST_SITECUSTOMIZE_MARKER", "<unset>"), flush=True)

sess = tf1.Session() if args.session == "first" else None
x = tf1.placeholder(tf.float32, [None, 2], name="x")
y = tf1.placeholder(tf.float32, [None, 1], name="y")
w = tf1.get_variable("w", [2, 1], initializer=tf1.zeros_initializer())
if worker == args.extra_var_on:
    tf1.get_variable("extra", [3], initializer=tf1.zeros_initializer())
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
global_step = tf1.train.get_or_create_global_step()
if args.session == "before-optimizer":
    sess = tf1.Session()
train_op = None
if not args.no_train:
    train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)

step_fetch = train_op
if args.watch_w0_at and train_op is not None:
    steps_run = [0]

    def watch_w0() -> int:
        steps_run[0] += 1
        if worker == 1 and steps_run[0] == args.watch_w0_at:
            host, port = json.loads(os.environ["ADRUN_CLUSTER"])["worker"][0].rsplit(":", 1)
            until = time.monotonic() + 3
            while time.monotonic() < until:
                socket.create_connection((host, int(port)), timeout=10).close()  # refused once w0 is gone
                time.sleep(0.1)
        return steps_run[0]

    with tf.control_dependencies([train_op]):  # runs after the step: part of it, as a script's metrics op is
        step_fetch = tf.py_function(watch_w0, [], tf.int32)


def misbehave() -> None:
    print(f"failing-at {time.time():.3f}", flush=True)
    if args.fail_how == "raise":
        raise RuntimeError(f"boom from w{worker}")
    if args.fail_how == "sigkill":
        os.kill(os.getpid(), 9)
    sys.exit(3)


with sess or tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    if args.print_env:
        for key in ("ADRUN_WORKER_INDEX", "ADRUN_NUM_WORKERS", "ADRUN_ROLE", "ADRUN_JOB_ID"):
            print(f"env {key}={os.environ.get(key, '<unset>')}", flush=True)
    if train_op is None:
        print("value", sess.run(loss, {x: np.ones((1, 2)), y: np.ones((1, 1))}), flush=True)
    for step in range(args.steps if train_op is not None else 0):
        if worker == args.fail_on and step == args.fail_at and args.fail_how != "exit3":
            misbehave()
        sess.run(step_fetch, {x: np.ones((4, 2), np.float32), y: np.ones((4, 1), np.float32)})
        print(f"step {step + 1}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    print("done", flush=True)

if args.print_modules:
    print("sitecustomize", getattr(sys.modules.get("sitecustomize"), "__file__", None))
    print("adrun-modules", sorted(name for name in sys.modules if name.split(".")[0] == "adrun"))

if worker == args.fail_on and args.fail_how == "exit3":
    misbehave()
