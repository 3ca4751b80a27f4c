"""What the TF2 peers share: their command line, TF_CONFIG and MultiWorkerMirroredStrategy, the global batch.

The TF2 peers are what a Keras user writes by hand to train bench/workloads/keras_models.py's models
on several machines without adrun: tf2_mwms_loop.py (a custom loop with `strategy.run`),
tf_keras_mwms_fit.py (tf_keras `fit`) and keras3_mwms_fit.py (Keras 3 `fit`). Each takes
`--workload <model>_keras` (the benchmark's name of the Keras workload), the cluster flags and that
model's own flags, and writes the workload scripts' result JSON.

Batch semantics: `--batch-size` is per worker, as for every contestant. MultiWorkerMirroredStrategy
thinks in global batches, so the peers give it `workers × --batch-size` (`global_batch`): each
worker still computes `--batch-size` examples a step, and the result file counts those.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from peer_args import host_list

from harness import add_workload_arguments, parse_workload_args
from keras_models import SIZES, workload_name

WORKLOADS = {workload_name(model): model for model in SIZES}


def parse_tf2_peer_args(description: str, argv: list[str] | None = None):
    """(args, model sizes, model name): `--workload` first (it decides the size flags), the cluster
    flags, then the model's flags. A task index outside the workers exits 2 naming both."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    known, _ = first.parse_known_args(argv)
    model = WORKLOADS[known.workload]
    parser = argparse.ArgumentParser(description=description, parents=[first])
    parser.add_argument("--worker-hosts", required=True, help="host:port,... of the workers (task 0 is the chief)")
    parser.add_argument("--task-index", type=int, required=True)
    add_workload_arguments(parser, model, SIZES)
    args, sizes = parse_workload_args(parser, model, argv, registry=SIZES)
    if not 0 <= args.task_index < len(host_list(args.worker_hosts)):
        parser.error(f"--task-index {args.task_index} is not a worker of --worker-hosts {args.worker_hosts}")
    return args, sizes, model


def make_strategy(args):
    """TF_CONFIG from the flags, then the strategy (it reads TF_CONFIG when made)."""
    import tensorflow as tf

    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": host_list(args.worker_hosts)},
                                          "task": {"type": "worker", "index": args.task_index}})
    return tf.distribute.MultiWorkerMirroredStrategy()


def global_batch(args) -> int:
    """The batch MultiWorkerMirroredStrategy is given: every worker's `--batch-size` together."""
    return args.batch_size * len(host_list(args.worker_hosts))


def fail(peer: str, message: str) -> None:
    sys.exit(f"{peer}: {message}")
