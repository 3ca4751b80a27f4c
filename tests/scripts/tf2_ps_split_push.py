"""A non-chief worker's synchronous gradient pushes of variables split over 2 PS tasks
(adrun/runtime/tf2/ps_apply.py gradient_parts, ps_exchange.py), each PS behind a byte-counting
forwarder (tests/support/byte_counter.py), started without adrun's launcher
(tests/integration/test_tf2_ps_split_push.py).

    python tf2_ps_split_push.py ps TASK PORT
    python tf2_ps_split_push.py worker PS0_PORT PS1_PORT FWD0_PORT FWD1_PORT WORKER_PORT OUT.json

For each case the worker pushes one step's gradient eagerly (eager remote ops send their inputs
through the worker's own connection to the PS, which the forwarder counts; inside a `tf.function`
the PS pulls them from the worker's server instead) after a warm-up push, and writes the bytes
each PS received for that push: a dense [4096, 32]
gradient of a variable split in 2 shards, an IndexedSlices of 64 rows of a [20000, 32] table split
in 2 shards (48 rows in shard 0, 16 in shard 1), and, as the control, the dense gradient pushed
whole to PS 0.
"""

import json
import sys
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.ps_apply import gradient_parts
from adrun.runtime.tf2.ps_cluster import connect_to_ps
from adrun.runtime.tf2.ps_exchange import GradientExchange
from adrun.strategies.document import Partition, PSSync, VariablePlan
from tests.support.byte_counter import CountingForwarder

DIM = 32
SPLIT = Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)])


def serve(task: str, port: str) -> None:
    tf.distribute.Server(tf.train.ClusterSpec({"ps": {int(task): f"localhost:{port}"}}), job_name="ps",
                         task_index=int(task)).join()


def received(forwarders: list[CountingForwarder], parts: Callable[[], list], call: int) -> list[int]:
    """Bytes each PS received for one push of what `parts()` makes (after a warm-up push that makes
    the handles). Each push's tensors are new: eager TF sends a tensor to a remote device once and
    reuses the copy there."""
    exchange = GradientExchange(call, num_workers=2, worker=1)

    def push() -> None:
        exchange.push(parts())
        context.async_wait()  # remote eager ops are sent asynchronously: every byte is out after this

    push()
    before = [f.sent for f in forwarders]
    push()
    return [f.sent - b for f, b in zip(forwarders, before, strict=True)]


def work(ps0: str, ps1: str, fwd0: str, fwd1: str, worker_port: str, out: str) -> None:
    forwarders = [CountingForwarder(int(fwd0), int(ps0)), CountingForwarder(int(fwd1), int(ps1))]
    ctx = TaskContext(mode="run", role="worker", task_index=1, num_workers=2, job_id="splitpush",
                      cluster={"ps": [f"localhost:{fwd0}", f"localhost:{fwd1}"],
                               "worker": ["localhost:1", f"localhost:{worker_port}"]})
    connect_to_ps(ctx)
    rng = np.random.default_rng(0)
    dense = tf.constant(rng.standard_normal((4096, DIM)), tf.float32)
    ids = np.concatenate([np.linspace(0, 9999, 48), np.linspace(10000, 19999, 16)]).astype(np.int64)
    rows = tf.IndexedSlices(tf.constant(rng.standard_normal((64, DIM)), tf.float32), tf.constant(ids),
                            tf.constant([20000, DIM], tf.int64))
    dense_plan = VariablePlan(name="dense", shape=[4096, DIM], dtype="float32", grad="dense", partition=SPLIT)
    table_plan = VariablePlan(name="table", shape=[20000, DIM], dtype="float32", grad="sparse", partition=SPLIT)
    found = {
        "dense_split": received(forwarders, lambda: gradient_parts(dense_plan, dense + 0.0), 0),
        "rows_split": received(forwarders, lambda: gradient_parts(table_plan, tf.IndexedSlices(
            rows.values + 0.0, rows.indices, rows.dense_shape)), 1),
        "dense_whole_to_ps0": received(forwarders, lambda: [("whole", dense + 0.0, 0)], 2),
    }
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    serve(*sys.argv[2:4]) if sys.argv[1] == "ps" else work(*sys.argv[2:8])
