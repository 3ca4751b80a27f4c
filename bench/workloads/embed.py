"""Sparse-dominant workload: a 1,000,000 x 32 embedding over bags of uniform ids, a small dense head, plain SGD.

An ordinary single-machine graph-mode script (tf.compat.v1.Session): runs with plain python or
unchanged under adrun. It times its steps after the warm-up and can write them as JSON:

    python bench/workloads/embed.py --steps 200 --warmup 20 --batch-size 256 --result-file out/w{worker}.json
"""

import argparse
import os
import time

import tensorflow as tf

from harness import add_workload_arguments, input_dataset, parse_workload_args, write_result
from models import graph_loss

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser(description=__doc__)
add_workload_arguments(parser, "embed")
args, model = parse_workload_args(parser, "embed")
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))

inputs = tf1.data.make_one_shot_iterator(input_dataset(model, args, worker)).get_next()
loss = graph_loss(model, inputs)
train_op = tf1.train.GradientDescentOptimizer(args.lr).minimize(loss, global_step=tf1.train.get_or_create_global_step())

with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    for _ in range(args.warmup):
        sess.run(train_op)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(args.steps - args.warmup):
        sess.run(train_op)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    print(f"worker {worker}: {args.steps - args.warmup} timed steps in {seconds:.3f} s, loss {sess.run(loss):.4f}")

if args.result_file:
    write_result(args.result_file, "embed", worker, args.steps - args.warmup, seconds, args.batch_size,
                 cpu_seconds)
