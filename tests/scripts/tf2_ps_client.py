"""An eager client of one PS task, as a TF2 worker of a PS plan is one (adrun/runtime/tf2/ps_cluster.py,
ps_variables.py): it connects with its own view of the cluster, then creates a shared variable's
handle on the PS, assigns it and reads it back (tests/integration/test_tf2_ps_task.py).

Usage: tf2_ps_client.py PS_ADDRESS OWN_PORT [COORDINATION_LEADER_ADDRESS]. With a leader, the view
names it as task `/job:coord/task:0` and the session config asks for TF's coordination service with
health checks, so the PS's creation of this client's context waits for that leader's answer.
Prints `connected` once the contexts exist, then `read <values>`.
"""

import sys

import tensorflow as tf
from tensorflow.core.protobuf import tensorflow_server_pb2
from tensorflow.python.eager import context
from tensorflow.python.ops import gen_resource_variable_ops

ps_address, own_port = sys.argv[1], int(sys.argv[2])
leader = sys.argv[3] if len(sys.argv) > 3 else None
cluster = {"ps": [ps_address], "worker": {0: f"localhost:{own_port}"}}
if leader:
    cluster["coord"] = [leader]
server_def = tensorflow_server_pb2.ServerDef(cluster=tf.train.ClusterSpec(cluster).as_cluster_def(),
                                             job_name="worker", task_index=0, protocol="grpc", port=own_port)
if leader:
    coordination = server_def.default_session_config.experimental.coordination_config
    coordination.service_type = "standalone"
    coordination.service_leader = "/job:coord/replica:0/task:0"
    coordination.enable_health_check = True
context.context().set_server_def(server_def)
context.context().ensure_initialized()
print("connected", flush=True)
with tf.device("/job:ps/replica:0/task:0/device:CPU:0"):
    handle = gen_resource_variable_ops.var_handle_op(shape=[2], dtype=tf.float32, shared_name="shared", container="")
    gen_resource_variable_ops.assign_variable_op(handle, tf.constant([1.0, 2.0]))
    value = gen_resource_variable_ops.read_variable_op(handle, tf.float32)
print("read", value.numpy().tolist(), flush=True)
