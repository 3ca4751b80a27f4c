"""CPU seconds one collective op of a small tensor costs two worker processes of one machine.

    .venv/bin/python -m bench.collective_cpu --ops 0,1,2,4,8 --steps 1000 --out bench/results/collective-cpu.json

The benchmark's namespace hosts share one 2-CPU machine, where a step of few bytes is CPU work
(docs/cost-model.md, "ncf at 1 Gbit/s: the CPUs set the step"). This measures, in plain TensorFlow
(no adrun), what each collective op adds to that work: two worker processes (gRPC servers on
loopback, TF's collective runtime with worker 0 as group leader, as adrun sets it up) each run a
step of K independent collective ops of a small float32 tensor (`--elements`) on a read of a local
variable, under fixed instance keys (`reduce_K`: CollectiveReduceV2, the dense ring's op) or keys
new every step (`gather_K`: CollectiveGatherV2 keyed by a step counter, as adrun gathers sparse
gradients, runtime/kernels/allreduce_sync.py `gather`). Per case and round each worker reports its
wall ms and its process's CPU ms per step (getrusage: all threads, user + system); the slope of the
two workers' CPU over K is the CPU per collective op and worker. The PS side's per-call CPU is
bench/loopback_ps_step.py's (its `ps_cpu_ms` and `worker_cpu_ms`). Run it under the benchmark lock.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click

from bench.children import Children
from bench.results_log import write_invocation

LEADER = "/job:worker/replica:0/task:0"
WARM_UP_STEPS = 100
START_UP_S = 120.0  # TensorFlow's import, the servers, the session, the collectives' first resolution
STEP_BOUND_S = 0.1  # some 10 times the slowest step measured (9.6 ms wall, K = 8 at load 6.7)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cases(tf, counts: Sequence[int], elements: int) -> dict:
    """One op per case: `reduce_K` and `gather_K` for each K (K = 0: the read alone)."""
    tf1 = tf.compat.v1
    start = tf1.get_variable("start", [elements], initializer=tf1.ones_initializer(), use_resource=True)
    steps = tf1.get_variable("steps", [], tf.int32, initializer=tf1.zeros_initializer(), use_resource=True)
    ops = {}
    for k in counts:
        x = start.read_value()
        outs = [tf.raw_ops.CollectiveReduceV2(input=x + i, group_size=2, group_key=1, instance_key=100 + 64 * k + i,
                                              ordering_token=[], merge_op="Add", final_op="Div")
                for i in range(k)]
        ops[f"reduce_{k}"] = tf.group(tf.reduce_sum(x), *outs)
        if k == 0:
            continue
        # a gather's instance key must differ per step; the counter that makes it is one scalar
        # kernel a step whatever K (microseconds against 0.33 ms an op), so it leaves the per-op
        # slope alone and the per-step intercept (fitted over reduces, without it, and gathers)
        # with at most half of it: the reduce_0 baseline runs without it
        step = steps.assign_add(1)
        outs = [tf.raw_ops.CollectiveGatherV2(input=x + i, group_size=2, group_key=2,
                                              instance_key=(step * 997 + 10_000 * k + i) % 0x3FFFFFFF + 1,
                                              ordering_token=[])
                for i in range(k)]
        ops[f"gather_{k}"] = tf.group(*outs)
    return ops


def deadline_s(counts: Sequence[int], steps: int, rounds: int) -> float:
    """How long a run may take: its start-up, then every case's steps (warm-up and timed) at
    `STEP_BOUND_S` each; a hang guard, far above any step measured."""
    cases = sum(1 if k == 0 else 2 for k in counts)
    return START_UP_S + cases * (WARM_UP_STEPS + rounds * steps) * STEP_BOUND_S


def _worker(index: int, cluster: dict, counts: Sequence[int], elements: int, steps: int, rounds: int) -> list[dict]:
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    config = tf.compat.v1.ConfigProto()
    config.experimental.collective_group_leader = LEADER
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=index, config=config)
    session_config = tf.compat.v1.ConfigProto()
    session_config.experimental.collective_group_leader = LEADER
    session_config.device_filters.append(f"/job:worker/task:{index}")
    with tf.compat.v1.device(f"/job:worker/task:{index}"):
        ops = _cases(tf, counts, elements)
    rows = []
    with tf.compat.v1.Session(server.target, config=session_config) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for op in ops.values():  # warm-up (the collectives' group and instances resolve on first use)
            for _ in range(WARM_UP_STEPS):
                sess.run(op)
        for rnd in range(rounds):
            for case, op in ops.items():
                wall, cpu = time.perf_counter(), _cpu_s()
                for _ in range(steps):
                    sess.run(op)
                rows.append({"round": rnd, "case": case, "worker": index, "steps": steps,
                             "wall_ms": (time.perf_counter() - wall) / steps * 1e3,
                             "cpu_ms": (_cpu_s() - cpu) / steps * 1e3, "load_average": os.getloadavg()[0]})
    return rows


def _worker_command(index: int, spec: dict, counts: str, elements: int, steps: int, rounds: int, part: Path) -> list[str]:
    return [sys.executable, "-m", "bench.collective_cpu", "--ops", counts, "--elements", str(elements), "--steps", str(steps),
            "--rounds", str(rounds), "--out", str(part), "--worker", str(index), "--cluster", json.dumps(spec)]


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--ops", "counts", default="0,1,2,4,8", show_default=True, help="comma-separated K: collective ops per step")
@click.option("--elements", type=click.IntRange(min=1), default=256, show_default=True, help="float32 elements per op")
@click.option("--steps", type=click.IntRange(min=10), default=1000, show_default=True, help="timed steps per case and round")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--worker", hidden=True, type=int, default=None)
@click.option("--cluster", hidden=True, default=None)
def main(counts: str, elements: int, steps: int, rounds: int, out: Path, worker: int | None, cluster: str | None) -> None:
    ks = [int(k) for k in counts.split(",")]
    if worker is not None:
        rows = _worker(worker, json.loads(cluster or "{}"), ks, elements, steps, rounds)
        out.write_text(json.dumps(rows) + "\n")
        return
    spec = {"worker": [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]}
    parts = [out.with_suffix(f".worker{i}.tmp") for i in range(2)]
    # a worker that fails leaves the other blocked in its collectives: the run ends at once, and
    # the workers are killed on any way out (a SIGTERM too: `timeout 900 ...`)
    with Children() as children:
        for i, part in enumerate(parts):
            children.start(f"worker {i}", _worker_command(i, spec, counts, elements, steps, rounds, part),
                           stderr=subprocess.DEVNULL)
        failure = children.wait(deadline_s(ks, steps, rounds), poll_s=0.5)
    if failure:
        raise click.ClickException(str(failure))
    results = [row for part in parts for row in json.loads(part.read_text())]
    for part in parts:
        part.unlink()
    for row in results:
        click.echo(f"round {row['round']} {row['case']} worker {row['worker']}: {row['wall_ms']:.3f} ms wall, "
                   f"CPU {row['cpu_ms']:.3f} ms per step")
    write_invocation(out, results, elements=elements)


if __name__ == "__main__":
    main()
