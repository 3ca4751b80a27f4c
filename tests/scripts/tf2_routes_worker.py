"""One worker of a 2-worker TF2 collective group with two virtual CPU devices, started without adrun
(tests/integration/test_tf2_routes.py): the GPU group's route is pointed at the second virtual CPU,
so floating-point collectives run there in their own group while integers stay in the host group,
as they would with NCCL on a GPU (adrun/runtime/tf2/routes.py).

    python tf2_routes_worker.py TASK_INDEX PORT0 PORT1 OUT.json

Broadcasts a float and an int64 variable from worker 0, reduces a dense gradient and gathers
sparse rows eagerly (to read the device each ran on) and in one traced step (both groups in one
function), and writes what it got as JSON.
"""

import json
import sys

import tensorflow as tf

from adrun.runtime.context import TaskContext
from adrun.runtime.tf2.broadcast import Broadcaster
from adrun.runtime.tf2.collective_runtime import start_collectives
from adrun.runtime.tf2.keys import StepKeys
from adrun.runtime.tf2.reduction import TF2Collectives
from adrun.runtime.tf2.routes import GPU_GROUP_KEY, HOST, Route, Routes
from adrun.strategies.document import AllReduceSync

index, ports, out = int(sys.argv[1]), sys.argv[2:4], sys.argv[4]
[cpu] = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
ctx = TaskContext(mode="run", role="worker", task_index=index, num_workers=2, job_id="routes",
                  cluster={"worker": [f"localhost:{port}" for port in ports]})
start_collectives(ctx)

routes = Routes(index, Route("CPU:1", GPU_GROUP_KEY, "auto"))  # the GPU group, on a virtual CPU
collectives = TF2Collectives(2, keys=StepKeys(routes.device(HOST)), routes=lambda: routes)
broadcaster = Broadcaster(index, 2, 60, lambda: routes)
with tf.variable_creator_scope(broadcaster):
    weights = tf.Variable(tf.fill([3], float(index + 1)))
    counts = tf.Variable(tf.constant([index + 10], tf.int64))

grad = tf.constant([1.0, 2.0, 3.0]) * float(index + 1)
rows = tf.IndexedSlices(tf.fill([index + 1, 2], float(index + 1)), tf.constant(list(range(index + 1)), tf.int64),
                        tf.constant([4, 2], tf.int64))
sync = AllReduceSync(group=0)


@tf.function
def step(grad, values, indices):
    dense = collectives.dense_means([("w", sync, grad)])["w"]
    sparse = collectives.sparse_rows("e", tf.IndexedSlices(values, indices, tf.constant([4, 2], tf.int64)), None)
    return dense, sparse.values, sparse.indices


dense, values, indices = step(grad, rows.values, rows.indices)
report = {
    "weights": weights.numpy().tolist(),
    "counts": counts.numpy().tolist(),
    "dense": dense.numpy().tolist(),
    "values": values.numpy().tolist(),
    "indices": indices.numpy().tolist(),
    "devices": {
        "float reduce": collectives.mean(grad, "eager").device,
        "int64 gather": collectives.gather(tf.constant([index], tf.int64), "eager").device,
        "float broadcast": broadcaster.broadcast(tf.constant([0.5])).device,
        "int64 broadcast": broadcaster.broadcast(tf.constant([5], tf.int64)).device,
    },
}
with open(out, "w") as f:
    json.dump(report, f)
