"""A parameter-server task: TF's own gRPC server for job `ps`, serving until adrun stops it."""

from __future__ import annotations

import tensorflow as tf

from adrun.placement import ps
from adrun.task_context import TaskContext
from adrun.runtime.session_setup import server_config


def main() -> None:
    ctx = TaskContext.from_env()
    me = ps(ctx.task_index)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(ctx.cluster), job_name=me.job, task_index=me.index, config=server_config()
    )
    print(f"{me.tag} serving at {ctx.cluster[me.job][me.index]}", flush=True)
    server.join()


if __name__ == "__main__":
    main()
