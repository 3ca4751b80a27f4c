"""Keras `fit` under MultiWorkerMirroredStrategy, as the TF2 guides write it; the fit peers' one body.

tf_keras_mwms_fit.py runs it with tf_keras (TF_USE_LEGACY_KERAS=1), keras3_mwms_fit.py with Keras 3:
the same script, only the Keras differs. The model is made and compiled under the strategy's scope;
`fit` gets a dataset batched at the global batch (tf2_peer.global_batch) that the strategy splits
between the workers, each worker's stream its own examples (auto-sharding off: the data are already
per worker, as sharded input files would be). A callback times the steps after the warm-up.
"""

from __future__ import annotations

import tensorflow as tf

from tf2_peer import global_batch, make_strategy, parse_tf2_peer_args

from harness import write_result
from keras_models import build, dataset, loss, step_timer


def fit_under_mwms(keras, description: str) -> None:
    """Train `--steps` steps of `--workload` by `keras`'s fit under the strategy; write the result."""
    args, sizes, _ = parse_tf2_peer_args(description)
    strategy = make_strategy(args)
    with strategy.scope():
        net = build(keras, sizes)
        net.compile(optimizer=keras.optimizers.SGD(args.lr), loss=loss(keras, sizes))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = dataset(sizes, args.seed, args.task_index, global_batch(args), pool_batch_size=args.batch_size)
    timer = step_timer(keras, args.warmup)
    net.fit(data.with_options(options), steps_per_epoch=args.steps, epochs=1, verbose=0, shuffle=False,
            callbacks=[timer])
    timed = args.steps - args.warmup
    print(f"worker {args.task_index}: {timed} timed steps in {timer.seconds:.3f} s")
    if args.result_file:
        write_result(args.result_file, args.workload, args.task_index, timed, timer.seconds, args.batch_size,
                     timer.cpu_seconds)
