"""A Keras 3 Embedding whose table is shared on a PS task (adrun/runtime/tf2/ps_variables.py), read
and trained by one worker through a byte-counting forwarder (tests/support/byte_counter.py), started
without adrun's launcher (tests/integration/test_tf2_ps_row_reads.py).

    python tf2_ps_row_reads.py ps PS_PORT
    python tf2_ps_row_reads.py worker PS_PORT FORWARDER_PORT WORKER_PORT OUT.json

The worker trains each (table rows, looked-up rows) case for a few SGD steps in a `tf.function`
and writes the bytes per step that came back from the PS: first with Keras's own read (before
ps_gather.row_reads), then with the distinct-row gather, then of a table split in 2 shards
(ps_shards.py), and of batches that name 64 distinct rows 8 times each (with, as the control, the
tf.Variable's own gather of every id).
"""

import json
import sys
from collections.abc import Callable
from typing import Any

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
ROWS = 20000
REPEATED = np.repeat(np.linspace(0, ROWS - 1, 64).astype(np.int32), 8)  # 512 ids, 64 distinct


def serve(port: str) -> None:
    tf.distribute.Server(tf.train.ClusterSpec({"ps": [f"localhost:{port}"]}), job_name="ps", task_index=0).join()


def shared_embedding(name: str, rows: int, shards: int = 1) -> tuple[keras.layers.Embedding, keras.optimizers.Optimizer]:
    """An Embedding of `rows` rows on the PS (split in `shards` shards, all on the one PS) and its
    SGD optimizer, built."""
    with tf.variable_creator_scope(SharedVariables({f"{name}/embeddings": [0] * shards}, chief=True, worker=0,
                                                   init_timeout_s=60)):
        layer = keras.layers.Embedding(rows, DIM, name=name)
        layer.build((None,))
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(layer.trainable_weights)
    assert len(shards_of(layer.embeddings)) == shards
    return layer, optimizer


def per_step(count: Callable[[], int], step: Callable[[], Any]) -> float:
    """`count()`'s growth per step over STEPS steps, after two warm-up steps."""
    step()
    step()
    before = count()
    for _ in range(STEPS):
        step()
    return (count() - before) / STEPS


def bytes_per_step(forwarder: CountingForwarder, name: str, rows: int, ids: np.ndarray, shards: int = 1,
                   lookup: Callable[[keras.layers.Embedding, tf.Tensor], tf.Tensor] | None = None) -> float:
    """Train an Embedding of `rows` rows on `ids` (by `lookup`, default the layer's call); the bytes
    the PS sent per step."""
    layer, optimizer = shared_embedding(name, rows, shards)
    ids = tf.constant(ids)

    @tf.function
    def step() -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(lookup(layer, ids) if lookup else layer(ids)))
        optimizer.apply(tape.gradient(loss, layer.trainable_weights), layer.trainable_weights)

    return per_step(lambda: forwarder.received, step)


def work(ps_port: str, forwarder_port: str, worker_port: str, out: str) -> None:
    forwarder = CountingForwarder(int(forwarder_port), int(ps_port))
    ctx = dict(mode="run", role="worker", task_index=0, num_workers=1, job_id="rowreads",
               cluster={"ps": [f"localhost:{forwarder_port}"], "worker": [f"localhost:{worker_port}"]})
    connect_to_ps(TaskContext(**ctx))
    ids_64 = lambda rows: np.linspace(0, rows - 1, 64).astype(np.int32)  # noqa: E731
    found = {"keras_read": bytes_per_step(forwarder, "keras_read", ROWS, ids_64(ROWS))}
    row_reads()
    for rows, looked_up in ((ROWS, 64), (80000, 64), (ROWS, 512)):
        found[f"gather_{rows}_{looked_up}"] = bytes_per_step(forwarder, f"gather_{rows}_{looked_up}", rows,
                                                             np.linspace(0, rows - 1, looked_up).astype(np.int32))
    # 512 ids, 64 distinct: the lookup reads 64 rows; the variable's own gather (the control) all 512
    found["distinct_64x8"] = bytes_per_step(forwarder, "distinct_64x8", ROWS, REPEATED)
    found["every_id_64x8"] = bytes_per_step(forwarder, "every_id_64x8", ROWS, REPEATED,
                                            lookup=lambda layer, ids: tf.gather(layer.embeddings.value, ids))
    gradients_of_whole_variables()
    found["split_20000_64"] = bytes_per_step(forwarder, "split_20000_64", ROWS, ids_64(ROWS), shards=2)
    found["split_distinct_64x8"] = bytes_per_step(forwarder, "split_distinct_64x8", ROWS, REPEATED, shards=2)
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    serve(sys.argv[2]) if sys.argv[1] == "ps" else work(*sys.argv[2:6])
