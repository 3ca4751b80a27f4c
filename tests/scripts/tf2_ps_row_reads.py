"""A Keras 3 Embedding whose table is shared on a PS task (adrun/runtime/tf2/ps_variables.py), read
by one worker through a byte-counting forwarder (tests/support/byte_counter.py), started without
adrun's launcher (tests/integration/test_tf2_ps_row_reads.py).

    python tf2_ps_row_reads.py ps PS_PORT
    python tf2_ps_row_reads.py worker PS_PORT FORWARDER_PORT WORKER_PORT OUT.json

The worker trains each (table rows, looked-up rows) case for a few SGD steps in a `tf.function`
and writes the bytes per step that came back from the PS: first with Keras's own read (before
ps_gather.row_reads), then with the row gather, then of a table split in 2 shards (ps_shards.py).
"""

import json
import sys

import keras
import numpy as np
import tensorflow as tf

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.ps_cluster import connect_to_ps
from adrun.runtime.tf2.ps_gather import row_reads
from adrun.runtime.tf2.ps_shards import gradients_of_whole_variables, shards_of
from adrun.runtime.tf2.ps_variables import SharedVariables
from tests.support.byte_counter import CountingForwarder

DIM = 32
STEPS = 5


def serve(port: str) -> None:
    tf.distribute.Server(tf.train.ClusterSpec({"ps": [f"localhost:{port}"]}), job_name="ps", task_index=0).join()


def bytes_per_step(forwarder: CountingForwarder, name: str, rows: int, looked_up: int, shards: int = 1) -> float:
    """Build an Embedding of `rows` rows on the PS (split in `shards` shards, all on the one PS),
    train it on `looked_up` distinct rows; the PS's bytes per step after two warm-up steps."""
    with tf.variable_creator_scope(SharedVariables({f"{name}/embeddings": [0] * shards}, chief=True, worker=0,
                                                   init_timeout_s=60)):
        layer = keras.layers.Embedding(rows, DIM, name=name)
        layer.build((None,))
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(layer.trainable_weights)
    assert len(shards_of(layer.embeddings)) == shards
    ids = tf.constant(np.linspace(0, rows - 1, looked_up).astype(np.int32))

    @tf.function
    def step() -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(ids)))
        optimizer.apply(tape.gradient(loss, layer.trainable_weights), layer.trainable_weights)

    step()
    step()
    before = forwarder.received
    for _ in range(STEPS):
        step()
    return (forwarder.received - before) / STEPS


def work(ps_port: str, forwarder_port: str, worker_port: str, out: str) -> None:
    forwarder = CountingForwarder(int(forwarder_port), int(ps_port))
    ctx = TaskContext(mode="run", role="worker", task_index=0, num_workers=1, job_id="rowreads",
                      cluster={"ps": [f"localhost:{forwarder_port}"], "worker": [f"localhost:{worker_port}"]})
    connect_to_ps(ctx)
    found = {"keras_read": bytes_per_step(forwarder, "keras_read", 20000, 64)}
    row_reads()
    for rows, looked_up in ((20000, 64), (80000, 64), (20000, 512)):
        found[f"gather_{rows}_{looked_up}"] = bytes_per_step(forwarder, f"gather_{rows}_{looked_up}", rows, looked_up)
    gradients_of_whole_variables()
    found["split_20000_64"] = bytes_per_step(forwarder, "split_20000_64", 20000, 64, shards=2)
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    serve(sys.argv[2]) if sys.argv[1] == "ps" else work(*sys.argv[2:6])
