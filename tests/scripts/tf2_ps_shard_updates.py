"""The chief's synchronous apply of Keras 3 variables split in 2 shards on a PS task (PartitionedPS:
adrun/runtime/tf2/ps_apply.py, ps_shard_updates.py), the PS behind a byte-counting forwarder
(tests/support/byte_counter.py), started without adrun's launcher
(tests/integration/test_tf2_ps_shard_updates.py).

    python tf2_ps_shard_updates.py ps PS_PORT
    python tf2_ps_shard_updates.py worker PS_PORT FORWARDER_PORT WORKER_PORT OUT.json

This process is the chief of 2 workers; a thread of it plays worker 1, pushing its gradient eagerly
and waiting for its release, as a non-chief does. For each case the chief runs synchronous steps in
a `tf.function` and writes the bytes per step that came back from the PS: a dense [4096, 32] kernel
with Adam, and 64 rows of a [20000, 32] table with SGD, first with Keras's update of the whole
variable (the control: before ps_updates.updates_on_their_ps), then with that patch.
"""

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.ps_apply import PSApply, gradient_parts
from adrun.runtime.tf2.ps_cluster import connect_to_ps
from adrun.runtime.tf2.ps_exchange import GradientExchange
from adrun.runtime.tf2.ps_shards import shards_of, slots_made_like_their_variable
from adrun.runtime.tf2.ps_updates import updates_on_their_ps
from adrun.runtime.tf2.ps_variables import SharedVariables
from adrun.strategies.document import Partition, PSSync, Strategy, VariablePlan, dump_strategy
from tests.support.byte_counter import CountingForwarder

DIM = 32
WARMUP, STEPS = 2, 5
SPLIT = Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=0)])
CASES = {  # name: (rows, gradient kind, optimizer)
    "dense_adam": (4096, "dense", lambda name: keras.optimizers.Adam(0.01, name=name)),
    "rows_sgd": (20000, "sparse", lambda name: keras.optimizers.SGD(0.1, name=name)),
}


class Uncounted:
    """steps.py's counters, not counted."""

    def started(self) -> Any:
        return tf.constant(0)

    def done(self, examples: Any) -> None:
        pass


def serve(port: str) -> None:
    tf.distribute.Server(tf.train.ClusterSpec({"ps": [f"localhost:{port}"]}), job_name="ps", task_index=0).join()


def gradient(rows: int, kind: str) -> Callable[[], Any]:
    """A step's gradient of a [rows, DIM] variable: dense, or 64 rows (ids over both shards, some twice)."""
    values = np.random.default_rng(0).standard_normal((64 if kind == "sparse" else rows, DIM)).astype(np.float32)
    ids = np.concatenate([np.linspace(0, rows - 1, 48), np.linspace(0, rows - 1, 16)]).astype(np.int64)

    def make() -> Any:
        if kind == "sparse":
            return tf.IndexedSlices(tf.constant(values), tf.constant(ids), tf.constant([rows, DIM], tf.int64))
        return tf.constant(values)

    return make


def per_step(forwarder: CountingForwarder, hook: PSApply, call: int, name: str, plans: dict[str, VariablePlan]) -> float:
    """The bytes the PS sent this process per synchronous step of the case named `name` (its phase,
    its case), worker 1 a thread."""
    rows, kind, make_optimizer = CASES[name.split("_", 1)[1]]
    with tf.variable_creator_scope(SharedVariables({p: [0, 0] for p in plans}, chief=True, worker=0, init_timeout_s=60)):
        variable = keras.Variable(np.zeros((rows, DIM), np.float32), name=name)
        optimizer = make_optimizer(f"optimizer_{name}")
        optimizer.build([variable])
    assert len(shards_of(variable)) == 2
    grad = gradient(rows, kind)

    def worker_1() -> None:
        exchange = GradientExchange(call, num_workers=2, worker=1)
        for _ in range(WARMUP + STEPS):
            exchange.end_step(exchange.push(gradient_parts(plans[name], grad())))
            context.async_wait()

    @tf.function
    def step() -> None:
        hook.around(optimizer, [grad()], [variable], lambda grads: optimizer.apply(grads, [variable]))

    thread = threading.Thread(target=worker_1, daemon=True)
    thread.start()
    for _ in range(WARMUP):
        step()
    before = forwarder.received
    for _ in range(STEPS):
        step()
    after = forwarder.received
    thread.join(timeout=120)
    assert not thread.is_alive(), "worker 1 did not get its releases"
    return (after - before) / STEPS


def work(ps_port: str, forwarder_port: str, worker_port: str, out: str) -> None:
    forwarder = CountingForwarder(int(forwarder_port), int(ps_port))
    plans = {f"{phase}_{case}": VariablePlan(name=f"{phase}_{case}", shape=[rows, DIM], dtype="float32", grad=kind,
                                             partition=SPLIT)
             for phase in ("whole", "shards") for case, (rows, kind, _) in CASES.items()}
    plan_file = Path(out).with_suffix(".plan.yml")
    dump_strategy(Strategy(version=1, kind="tf2", builder="test", fingerprint="f", num_workers=2, num_ps=1,
                           variables=list(plans.values())), plan_file)
    ctx = TaskContext(mode="run", role="worker", task_index=0, num_workers=2, job_id="shardupdates",
                      cluster={"ps": [f"localhost:{forwarder_port}"], "worker": [f"localhost:{worker_port}", "localhost:1"]},
                      strategy_file=str(plan_file))
    connect_to_ps(ctx)
    slots_made_like_their_variable()
    hook = PSApply(ctx, Uncounted())
    found = {name: per_step(forwarder, hook, call, name, plans) for call, name in enumerate(f"whole_{c}" for c in CASES)}
    updates_on_their_ps()
    found.update({name: per_step(forwarder, hook, len(CASES) + call, name, plans)
                  for call, name in enumerate(f"shards_{c}" for c in CASES)})
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    serve(sys.argv[2]) if sys.argv[1] == "ps" else work(*sys.argv[2:6])
