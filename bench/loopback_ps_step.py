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

`--hops 0,1,2,3,4,6,8` measures instead what one dependent message between the two processes costs
(`chain_K`): a step of K tiny ops (sin/cos of 8 floats) alternating between the PS task and the
worker, each needing the one before, and a sum on the worker, so that 2 * ceil(K / 2) messages
cross one after another, each a RecvTensor reply the next op waits for: its loopback, the other
process's wake-ups and their CPU. The slope of wall ms over the crossings is the cost of one
dependent message; what chain_1 takes beyond chain_0 less two of them, the PS task's being in the
step at all (its subgraph's call and completion). Also per case the context switches of both
processes (/proc/PID/task/*/status) and their time waiting for a CPU (/proc/PID/task/*/schedstat).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click

from bench.children import Children, Role
from bench.results_log import write_invocation

CASES = ("local", "ps", "embeddings_on_ps", "embeddings_on_ps_global_step", "tiny_local", "tiny_ps", "wide_local",
         "wide_ps")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sched(pid: int) -> tuple[int, int]:
    """Voluntary + involuntary context switches, and ns waited on a run queue, over all of `pid`'s threads."""
    switches = waited = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
            waited += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
        switches += sum(int(line.split()[1]) for line in status if "ctxt_switches:" in line)
    return switches, waited


def _ps_task(cluster: str) -> None:
    import tensorflow as tf
    tf.distribute.Server(tf.train.ClusterSpec(json.loads(cluster)), job_name="ps", task_index=0).join()


def ncf_loss(tf, users, items, worker: str, embeddings_at: str, dense_at: str):
    """bench/workloads/models.py's NCF in the current variable scope: its two embeddings on
    `embeddings_at`, its three dense layers on `dense_at`, the lookups and the layers' math on `worker`."""
    tf1 = tf.compat.v1
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
        return tf1.reduce_mean(tf1.square(tf1.matmul(h, layers[-1][0]) + layers[-1][1]))


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
            loss = ncf_loss(tf, users, items, worker, embeddings_at, dense_at)
            with tf1.device(worker):
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


def _chain_ops(tf, worker: str, ps: str, hops: Sequence[int]) -> dict:
    """`chain_K` per K in `hops`: K dependent ops alternating PS, worker, PS, ... after a read of a
    worker variable (no constant to fold), then a sum on the worker: the step waits for 2 * ceil(K /
    2) messages between the processes, one after another."""
    tf1 = tf.compat.v1
    with tf1.device(worker):
        start = tf1.get_variable("chain_start", [8], initializer=tf1.ones_initializer(), use_resource=True)
    ops = {}
    for k in hops:
        with tf1.device(worker):
            x = start.read_value()
        for i in range(k):
            with tf1.device(ps if i % 2 == 0 else worker):
                x = tf1.sin(x) if i % 2 == 0 else tf1.cos(x)
        with tf1.device(worker):
            ops[f"chain_{k}"] = tf1.reduce_sum(x).op
    return ops


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--steps", type=click.IntRange(min=10), default=1500, show_default=True, help="timed steps per case and round")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--wide-rows", type=click.IntRange(min=1), default=256, show_default=True,
              help="rows of the wide_* cases' variable (x 1000 float32)")
@click.option("--hops", default=None, help="comma-separated K: measure chain_K (K dependent one-way messages) only")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--ps-task", hidden=True, default=None)
def main(steps: int, rounds: int, wide_rows: int, hops: str | None, out: Path, ps_task: str | None) -> None:
    if ps_task is not None:
        _ps_task(ps_task)
        return
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    cluster = {"worker": [f"127.0.0.1:{_free_port()}"], "ps": [f"127.0.0.1:{_free_port()}"]}
    # the PS is killed on any way out, a SIGTERM too (bench/children.py)
    with Children() as children:
        ps = children.start("the PS", [sys.executable, "-m", "bench.loopback_ps_step", "--out", str(out), "--ps-task",
                                       json.dumps(cluster)], role=Role.SERVER, stderr=subprocess.DEVNULL).proc
        server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=0)
        ops = (_chain_ops(tf, "/job:worker/task:0", "/job:ps/task:0", [int(k) for k in hops.split(",")]) if hops
               else _train_ops(tf, "/job:worker/task:0", "/job:ps/task:0", wide_rows))
        results = []
        config = tf.compat.v1.ConfigProto()
        # grappler would fuse a chain's unary ops into one, across devices (UnaryOpsComposition)
        config.graph_options.rewrite_options.disable_meta_optimizer = bool(hops)
        with tf.compat.v1.Session(server.target, config=config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for op in ops.values():  # warm-up
                for _ in range(200):
                    sess.run(op)
            for rnd in range(rounds):
                for case in ops:
                    sched = [_sched(os.getpid()), _sched(ps.pid)]
                    wall, worker_cpu, ps_cpu = time.perf_counter(), _cpu_s(os.getpid()), _cpu_s(ps.pid)
                    for _ in range(steps):
                        sess.run(ops[case])
                    row = {"round": rnd, "case": case, "steps": steps,
                           "wall_ms": (time.perf_counter() - wall) / steps * 1e3,
                           "worker_cpu_ms": (_cpu_s(os.getpid()) - worker_cpu) / steps * 1e3,
                           "ps_cpu_ms": (_cpu_s(ps.pid) - ps_cpu) / steps * 1e3,
                           **{f"{who}_{what}": (after - before) / steps * scale
                              for who, (b, a) in zip(("worker", "ps"), zip(sched, [_sched(os.getpid()), _sched(ps.pid)], strict=True), strict=True)
                              for what, before, after, scale in (("switches", b[0], a[0], 1), ("runqueue_ms", b[1], a[1], 1e-6))},
                           "load_average": os.getloadavg()[0]}
                    results.append(row)
                    click.echo(f"round {rnd} {case}: {row['wall_ms']:.3f} ms wall, CPU {row['worker_cpu_ms']:.2f} "
                               f"(worker) + {row['ps_cpu_ms']:.2f} (PS) ms, switches {row['worker_switches']:.1f} + "
                               f"{row['ps_switches']:.1f}, run queue {row['worker_runqueue_ms']:.3f} + "
                               f"{row['ps_runqueue_ms']:.3f} ms per step")
    write_invocation(out, results)


if __name__ == "__main__":
    main()
