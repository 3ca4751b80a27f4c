"""A PS task of a TF2 parameter-server plan: TF's gRPC server, started by an eager context of its own.

Why not `tf.distribute.Server`, as graph-mode plans start theirs (ps_server.py): TF 2.21's eager
service (`EagerServiceImpl::CreateContext`) replaces the server's collective executor manager each
time it creates a client's context while it holds none, and a context it made a moment before keeps
a raw pointer to the manager that was replaced and freed. Two workers connecting at once both find
the service empty; the PS then calls the freed manager when it makes the first kernel of the first
one's context (the `VarHandleOp` of ps_variables.py) and dies by SIGSEGV (docs/tf2-plans.md,
"Known problems"). A server started by `set_server_def` registers this process's own context with
its eager service before it starts serving, so no worker's context creation finds it empty.

The server def lists this task alone: an eager context creates a context on every task its server
def lists, and the workers' contexts on this task carry the workers' own views of the cluster
(ps_cluster.py).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.core.protobuf import tensorflow_server_pb2
from tensorflow.python.eager import context

from adrun.task_context import TaskContext


def start_server(ctx: TaskContext) -> None:
    """Start this PS task's server; it serves from a background thread for the process's life."""
    address = ctx.cluster["ps"][ctx.task_index]
    view = tf.train.ClusterSpec({"ps": {ctx.task_index: address}})
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=view.as_cluster_def(), job_name="ps", task_index=ctx.task_index, protocol="grpc",
        port=int(address.rsplit(":", 1)[1]),
    )
    context.context().set_server_def(server_def)
    context.context().ensure_initialized()
