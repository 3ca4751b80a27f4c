"""Peer: TF 2 all-reduce with MultiWorkerMirroredStrategy, written by hand without adrun.

A TF 2 user's custom training loop: TF_CONFIG names the workers, variables are made under the
strategy's scope (the chief's initial values are broadcast), each worker reads its own batches
through `distribute_datasets_from_function`, the loss is averaged over the global batch so the
all-reduced (summed) gradients are the mean gradient, and a Keras SGD optimizer applies them:

    python bench/peers/tf_mwms.py --workload sparse --worker-hosts h1:2222,h2:2222 --task-index 0 \\
        --steps 200 --warmup 20 --result-file out/w{worker}.json

The same models as the workload scripts (bench/workloads/models.py) and the same per-worker batch.
Every worker counts the others in an all-reduce before the timed steps, so the timing starts only
once all have joined; every step all-reduces every gradient, so each update holds every worker's.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

from peer_args import host_list, parse_peer_args

from harness import input_dataset, write_result


def add_cluster_arguments(parser) -> None:
    parser.add_argument("--worker-hosts", required=True, help="host:port,... of the workers (task 0 is the chief)")
    parser.add_argument("--task-index", type=int, required=True)


def main() -> None:
    args, model = parse_peer_args(__doc__.splitlines()[0], add_cluster_arguments)
    workers = host_list(args.worker_hosts)
    if not 0 <= args.task_index < len(workers):
        sys.exit(f"tf_mwms: --task-index {args.task_index} is not a worker of --worker-hosts {args.worker_hosts}")
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                          "task": {"type": "worker", "index": args.task_index}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = args.task_index
    global_batch = args.batch_size * strategy.num_replicas_in_sync

    with strategy.scope():
        params = {spec.name: tf.Variable(spec.initializer(spec.shape, tf.float32), name=spec.name)
                  for spec in model.variables()}
        optimizer = tf.keras.optimizers.SGD(args.lr)
    variables = list(params.values())
    batches = iter(strategy.distribute_datasets_from_function(
        lambda context: input_dataset(model, args, context.input_pipeline_id)))

    @tf.function
    def train_step(iterator):
        def step(inputs):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(model.per_example_loss(params, inputs), global_batch_size=global_batch)
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        strategy.run(step, args=(next(iterator),))

    @tf.function
    def workers_present():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1)))

    initial = [v.numpy() for v in variables]
    for _ in range(args.warmup):
        train_step(batches)
    present = int(strategy.experimental_local_results(workers_present())[0])
    if present != len(workers):
        sys.exit(f"tf_mwms: worker {worker}: {present} of {len(workers)} workers answered the barrier")
    timed = args.steps - args.warmup
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(timed):
        train_step(batches)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    workers_present()  # nobody leaves (tearing down its collectives) while another still steps

    print(f"worker {worker}: {timed} timed steps in {seconds:.3f} s")
    if args.dump_variables:
        np.savez(args.dump_variables.replace("{worker}", str(worker)), global_step=int(optimizer.iterations.numpy()),
                 **{f"init/{name}": value for name, value in zip(params, initial, strict=True)},
                 **{f"final/{name}": v.numpy() for name, v in params.items()})
    if args.result_file:
        write_result(args.result_file, args.workload, worker, timed, seconds, args.batch_size, cpu_seconds)


if __name__ == "__main__":
    main()
