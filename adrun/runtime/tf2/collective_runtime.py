"""TF's collective runtime for a TF2 worker, started at `import tensorflow`, before the first op.

No `tf.distribute` strategy is made: Keras keeps its single-process code path, and adrun calls the
collectives itself. This is what MultiWorkerMirroredStrategy's constructor does
(`collective_all_reduce_strategy.py`, `_initialize_multi_worker`), with two of adrun's choices:
- the cluster is the workers only: an all-reduce plan has no PS (a PS plan runs ps_cluster.py instead);
- the server's `default_session_config` carries the collective group leader. Without it the first
  collective waits for its group forever (seen: a broadcast timing out after 60 s on every worker).

Which device and implementation each collective uses (NCCL on GPUs) is routes.py's choice, made
here for this worker at its first collective (`routes_of`).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable

import tensorflow as tf
from tensorflow.core.protobuf import tensorflow_server_pb2
from tensorflow.python.eager import context

from adrun.errors import UserError
from adrun.runtime.context import TaskContext
from adrun.runtime.kernels.devices import COLLECTIVE_GROUP_LEADER
from adrun.runtime.refusal import refuse
from adrun.runtime.tf2.routes import Routes, choose_routes

def start_collectives(ctx: TaskContext) -> None:
    """Make this process task `ctx.task_index` of the job's workers, able to run collectives."""
    workers = ctx.cluster["worker"]
    eager = context.context()
    eager.configure_collective_ops(
        collective_leader=COLLECTIVE_GROUP_LEADER,
        scoped_allocator_enabled_ops=("CollectiveReduce",),
        device_filters=(f"/job:worker/task:{ctx.task_index}",),
    )
    config = copy.deepcopy(eager.config)
    config.experimental.collective_group_leader = COLLECTIVE_GROUP_LEADER
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=tf.train.ClusterSpec({"worker": workers}).as_cluster_def(),
        default_session_config=config,
        job_name="worker",
        task_index=ctx.task_index,
        protocol="grpc",
        port=int(workers[ctx.task_index].rsplit(":", 1)[1]),
    )
    # Not initialized here: the context starts at the script's first op, after the script's own
    # tf.config settings (threads, devices), which TF refuses once it has started.
    eager.enable_collective_ops(server_def)


def routes_of(ctx: TaskContext) -> Callable[[], Routes]:
    """This worker's collective routes, decided once, at its first collective (the first variable the
    script creates): by then the script's own `tf.config` settings (visible devices) are made, and
    TF's context starts then anyway. A plan on GPUs this process cannot follow refuses the script."""

    @functools.cache
    def decided() -> Routes:
        try:
            return choose_routes(ctx.task_index, ctx.strategy.replica_devices, len(tf.config.list_logical_devices("GPU")),
                                 os.environ.get("CUDA_VISIBLE_DEVICES"))
        except UserError as error:
            refuse(str(error))

    return decided
