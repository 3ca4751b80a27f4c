"""A parameter-server task: TF's own gRPC server for job `ps`, serving until adrun stops it.

Graph-mode plans' PS tasks serve with `tf.distribute.Server`, which knows the whole cluster (the
workers' sessions place graph partitions here). A TF2 plan's starts its server through an eager
context of its own (tf2/ps_task.py), so that two workers' eager contexts can be created on it at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import tensorflow as tf

from adrun.placement import ps
from adrun.task_context import TaskContext
from adrun.runtime.session_setup import server_config


def main() -> None:
    ctx = TaskContext.from_env()
    me = ps(ctx.task_index)
    if ctx.strategy.kind == "tf2":
        from adrun.runtime.tf2.ps_task import start_server

        start_server(ctx)
        serve: Callable[[], object] = threading.Event().wait  # TF's threads serve; this one waits
    else:
        server = tf.distribute.Server(
            tf.train.ClusterSpec(ctx.cluster), job_name=me.job, task_index=me.index, config=server_config()
        )
        serve = server.join
    print(f"{me.tag} serving at {ctx.cluster[me.job][me.index]}", flush=True)
    serve()


if __name__ == "__main__":
    main()
