"""What a one-worker step costs when its variables live on a PS task of the same host (loopback).

    .venv/bin/python -m bench.loopback_ps_step --steps 1500 --out bench/results/loopback-ps-step.json

The benchmark's 1-host groups run one worker and one PS on one 2-CPU machine, every transfer over
loopback. This measures, in plain TensorFlow (no adrun), an ncf-sized model (bench/workloads/
models.py's NCF: two embeddings, three dense layers, plain SGD) with every variable on the worker
(`local`), every variable on the PS (`ps`: the PS plan at one worker), only the embeddings on the
PS (`embeddings_on_ps`: Parallax's; `embeddings_on_ps_global_step` also increments a global_step
kept on the PS, as adrun keeps the state a plan with PSs does not name, after the worker's own
updates), one 8 x 8 variable on the worker or the PS (`tiny_*`), and one `--wide-rows` x 1000
float32 variable on the worker or the PS (`wide_*`; 256 rows: 1 MB, the sparse workload's logits
kernel): read from the PS and its gradient pushed back, twice its bytes a step over loopback. What
`wide_ps` takes beyond `wide_local`, less what `tiny_ps` takes beyond `tiny_local`, is what those
bytes cost on the host's local path (with 4096 rows, 33 MB a step, the bytes dominate the spread).
Per case and round: wall ms per step and the CPU ms per step of each process (utime + stime from
/proc), the CPU being the steadier figure on a shared machine. Run it under the benchmark lock.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

CASES = ("local", "ps", "embeddings_on_ps", "embeddings_on_ps_global_step", "tiny_local", "tiny_ps", "wide_local",
         "wide_ps")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ps_task(cluster: str) -> None:
    import tensorflow as tf
    tf.distribute.Server(tf.train.ClusterSpec(json.loads(cluster)), job_name="ps", task_index=0).join()


def _train_ops(tf, worker: str, ps: str, wide_rows: int = 256) -> dict:
    """One train op per case, all in one graph."""
    tf1 = tf.compat.v1
    ops = {}
    with tf1.device(worker):
        users = tf1.random.uniform([256], maxval=100_000, dtype=tf.int64)
        items = tf1.random.uniform([256], maxval=20_000, dtype=tf.int64)
        x = tf1.random.normal([64, 8])
        wide_x = tf1.random.normal([64, wide_rows])
    with tf1.device(ps):  # where adrun keeps the state a plan with PSs does not name (kernels/placement.py)
        global_step = tf1.train.get_or_create_global_step()
    for case, embeddings_at, dense_at in (("local", worker, worker), ("ps", ps, ps), ("embeddings_on_ps", ps, worker),
                                          ("embeddings_on_ps_global_step", ps, worker)):
        with tf1.variable_scope(case):
            with tf1.device(embeddings_at):
                user_emb = tf1.get_variable("user_embedding", [100_000, 32], use_resource=True)
                item_emb = tf1.get_variable("item_embedding", [20_000, 32], use_resource=True)
            with tf1.device(dense_at):
                layers = [(tf1.get_variable(f"k{i}", shape, use_resource=True),
                           tf1.get_variable(f"b{i}", shape[1:], use_resource=True))
                          for i, shape in enumerate(([96, 128], [128, 64], [64, 1]))]
            with tf1.device(worker):
                u, i = tf1.nn.embedding_lookup(user_emb, users), tf1.nn.embedding_lookup(item_emb, items)
                h = tf1.concat([u, i, u * i], 1)
                for k, b in layers[:-1]:
                    h = tf1.nn.relu(tf1.matmul(h, k) + b)
                loss = tf1.reduce_mean(tf1.square(tf1.matmul(h, layers[-1][0]) + layers[-1][1]))
                step = global_step if case.endswith("global_step") else None
                ops[case] = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
    for case, at in (("tiny_local", worker), ("tiny_ps", ps)):
        with tf1.device(at):
            v = tf1.get_variable(case, [8, 8], initializer=tf1.zeros_initializer(), use_resource=True)
        with tf1.device(worker):
            ops[case] = tf1.train.GradientDescentOptimizer(0.01).minimize(tf1.reduce_sum(tf1.matmul(x, v)))
    for case, at in (("wide_local", worker), ("wide_ps", ps)):
        with tf1.device(at):
            v = tf1.get_variable(case, [wide_rows, 1000], initializer=tf1.zeros_initializer(), use_resource=True)
        with tf1.device(worker):
            ops[case] = tf1.train.GradientDescentOptimizer(0.01).minimize(tf1.reduce_sum(tf1.matmul(wide_x, v)))
    return ops


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--steps", type=click.IntRange(min=10), default=1500, show_default=True, help="timed steps per case and round")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--wide-rows", type=click.IntRange(min=1), default=256, show_default=True,
              help="rows of the wide_* cases' variable (x 1000 float32)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--ps-task", hidden=True, default=None)
def main(steps: int, rounds: int, wide_rows: int, out: Path, ps_task: str | None) -> None:
    if ps_task is not None:
        _ps_task(ps_task)
        return
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    cluster = {"worker": [f"127.0.0.1:{_free_port()}"], "ps": [f"127.0.0.1:{_free_port()}"]}
    ps = subprocess.Popen([sys.executable, "-m", "bench.loopback_ps_step", "--out", str(out), "--ps-task",
                           json.dumps(cluster)], stderr=subprocess.DEVNULL)
    try:
        server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=0)
        ops = _train_ops(tf, "/job:worker/task:0", "/job:ps/task:0", wide_rows)
        results = []
        with tf.compat.v1.Session(server.target) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for op in ops.values():  # warm-up
                for _ in range(200):
                    sess.run(op)
            for rnd in range(rounds):
                for case in CASES:
                    wall, worker_cpu, ps_cpu = time.perf_counter(), _cpu_s(os.getpid()), _cpu_s(ps.pid)
                    for _ in range(steps):
                        sess.run(ops[case])
                    row = {"round": rnd, "case": case, "steps": steps,
                           "wall_ms": (time.perf_counter() - wall) / steps * 1e3,
                           "worker_cpu_ms": (_cpu_s(os.getpid()) - worker_cpu) / steps * 1e3,
                           "ps_cpu_ms": (_cpu_s(ps.pid) - ps_cpu) / steps * 1e3,
                           "load_average": os.getloadavg()[0]}
                    results.append(row)
                    click.echo(f"round {rnd} {case}: {row['wall_ms']:.2f} ms wall, CPU {row['worker_cpu_ms']:.2f} "
                               f"(worker) + {row['ps_cpu_ms']:.2f} (PS) ms per step")
    finally:
        ps.kill()
        ps.wait()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "cpus": os.cpu_count(), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
