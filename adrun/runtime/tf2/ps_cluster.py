"""A TF2 worker of a parameter-server plan: this process as a client of the job's PS tasks.

Each worker sets its own view of the cluster, `{ps: [...], worker: {r: own address}}`: with the full
worker list one worker hung and the other failed with `Socket closed` (tf2-path.md (c)), since an
eager client's server def makes every listed task reachable from it. The server def is set before
TF's context starts (it is applied at the script's first op, after the script's own tf.config
settings), so this process never runs collectives: TF 2.21 refuses remote devices and collective
ops in one process (strategies/document.py, tf2_refusals).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.core.protobuf import tensorflow_server_pb2
from tensorflow.python.eager import context

from adrun.runtime.context import TaskContext


def connect_to_ps(ctx: TaskContext) -> None:
    """Make `/job:ps/task:k` devices usable from this worker once TF's context starts."""
    address = ctx.cluster["worker"][ctx.task_index]
    view = tf.train.ClusterSpec({"ps": ctx.cluster["ps"], "worker": {ctx.task_index: address}})
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=view.as_cluster_def(), job_name="worker", task_index=ctx.task_index, protocol="grpc",
        port=int(address.rsplit(":", 1)[1]),
    )
    context.context().set_server_def(server_def)
