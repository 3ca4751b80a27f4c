"""Peer: a Keras 3 model trained by a custom loop under MultiWorkerMirroredStrategy, written by hand without adrun.

What the TF2 guides teach for multi-worker Keras 3 training: TF_CONFIG names the workers, the model
and a Keras SGD optimizer are made under the strategy's scope (the chief's initial values are
broadcast), each worker reads its own batches through `distribute_datasets_from_function`, a
`tf.function` step calls `strategy.run`, the per-example loss is averaged over the global batch
(tf.nn.compute_average_loss) and the optimizer all-reduces the gradients as it applies them:

    python bench/peers/tf2_mwms_loop.py --workload sparse_keras --worker-hosts h1:2222,h2:2222 --task-index 0 \\
        --steps 200 --warmup 20 --result-file out/w{worker}.json

Every worker counts the others in an all-reduce before the timed steps, so the timing starts only
once all have joined, and again after them, so nobody leaves while another still steps.
"""

from __future__ import annotations

import time

import keras
import tensorflow as tf

from tf2_peer import fail, global_batch, make_strategy, parse_tf2_peer_args

from harness import write_result
from keras_models import build, dataset, loss


def main() -> None:
    args, sizes, _ = parse_tf2_peer_args(__doc__.splitlines()[0])
    strategy = make_strategy(args)
    batch = global_batch(args)
    with strategy.scope():
        net = build(keras, sizes)
        optimizer = keras.optimizers.SGD(args.lr)
    per_example_loss = loss(keras, sizes, reduction=None)
    batches = iter(strategy.distribute_datasets_from_function(
        lambda context: dataset(sizes, args.seed, context.input_pipeline_id, context.get_per_replica_batch_size(batch))))

    @tf.function
    def train_step(iterator):
        def step(inputs):
            features, label = inputs
            with tf.GradientTape() as tape:
                mean = tf.nn.compute_average_loss(per_example_loss(label, net(features, training=True)),
                                                  global_batch_size=batch)
            optimizer.apply_gradients(zip(tape.gradient(mean, net.trainable_variables), net.trainable_variables, strict=True))
        strategy.run(step, args=(next(iterator),))

    @tf.function
    def workers_present():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1)))

    for _ in range(args.warmup):
        train_step(batches)
    present = int(strategy.experimental_local_results(workers_present())[0])
    if present != strategy.num_replicas_in_sync:
        fail("tf2_mwms_loop", f"worker {args.task_index}: {present} of {strategy.num_replicas_in_sync} answered the barrier")
    timed = args.steps - args.warmup
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(timed):
        train_step(batches)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    workers_present()
    print(f"worker {args.task_index}: {timed} timed steps in {seconds:.3f} s")
    if args.result_file:
        write_result(args.result_file, args.workload, args.task_index, timed, seconds, args.batch_size, cpu_seconds)


if __name__ == "__main__":
    main()
