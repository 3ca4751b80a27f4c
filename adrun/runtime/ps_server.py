"""A parameter-server task: TF's own gRPC server for job `ps`, serving until adrun stops it."""

from __future__ import annotations

import tensorflow as tf

from adrun.task_context import TaskContext
from adrun.runtime.session_setup import server_config


def main() -> None:
    ctx = TaskContext.from_env()
    server = tf.distribute.Server(
        tf.train.ClusterSpec(ctx.cluster), job_name="ps", task_index=ctx.task_index, config=server_config()
    )
    print(f"ps{ctx.task_index} serving at {ctx.cluster['ps'][ctx.task_index]}", flush=True)
    server.join()


if __name__ == "__main__":
    main()
