"""The CPU a synchronous PS step of n workers costs when the workers and the PS share one machine.

    .venv/bin/python -m bench.loopback_ps_workers --workers 2 --steps 1500 --rounds 3 --out /tmp/w2.json
    .venv/bin/python -m bench.loopback_ps_workers --summarize bench/results/loopback-ps-workers.json

adrun's cost model bounds a step on CPUs the hosts share by the CPU work of its synchronization
(strategies/cost_model.py, `StepCost.cpu_work_s`), whose PS terms bench/loopback_ps_step.py
measured with one worker, where adrun's step exchanges nothing (each variable read from the PS,
its gradient applied there). With n > 1 workers adrun's synchronous PS step is another mechanism:
every worker reads the variables and pushes its gradient into an accumulator on the PS
(runtime/kernels/ps_sync.py: small dense gradients batched into one buffer, a sparse gradient's
equal rows merged first), the chief takes the sums once, applies them once, and releases each
other worker through its token queue on the PS. This builds that step with adrun's own kernels
(`ps_aggregations`, `StepTokens`: TF ops, no launcher) for n worker processes and one PS process
on loopback, ncf's model (loopback_ps_step's `ncf_loss`), and measures each process's CPU
(utime + stime) per step. With `--workers 1` the step is adrun's one-worker step (no accumulator,
no token), loopback_ps_step's cases.

Cases: `local` (every worker its own copy of every variable, updated from its own gradient: the
workers' compute and no synchronization), `ps` (all of ncf's variables on the PS, synchronous: 2
sparse pieces and 6 dense ones), `embeddings_on_ps` (the two embeddings synchronous on the PS, the
dense layers each worker's own, as in `local`: the sparse pieces alone), `tiny_local` and `tiny_ps`
(one 8 x 8 variable: a PS task's call and one dense piece). What a case takes beyond its local
counterpart, over every process, is its synchronization's CPU. The workers run the cases in one
order, each `--steps` steps a round, in lock step (the chief's take waits for every push, each
other worker for its token); each worker measures its own CPU, the chief the PS's. The run stops
with the reason when a worker fails, the PS exits or its deadline (`deadline_s`) passes, keeping
the failed process's output (`<out>.worker<i>.err`, `<out>.ps.err`), and kills every process it
started on any way out, SIGTERM included (bench/children.py). Run it under the benchmark lock.
`--summarize` reads the runs of a results file (one run, or bench/results/loopback-ps-workers.json's
invocations) and prints each case's synchronization against n times its one-worker figure
(docs/cost-model.md, "The PS terms at n workers").
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click
import numpy as np

from bench.loopback_ps_step import _cpu_s, _free_port, ncf_loss
from bench.children import Children, Role
from bench.results_log import write_invocation

CASES = ("local", "ps", "embeddings_on_ps", "tiny_local", "tiny_ps")
# (sparse, dense) synchronous PS pieces of each case; its local counterpart
PIECES = {"ps": (2, 6), "embeddings_on_ps": (2, 0), "tiny_ps": (0, 1)}
BASELINE = {"ps": "local", "embeddings_on_ps": "local", "tiny_ps": "tiny_local"}
WARM_UP_STEPS = 200
START_UP_S = 120.0  # TensorFlow's import, the servers, the session, the chief's initialization
STEP_BOUND_S = 0.1


def _place(case: str, worker: str, ps: str) -> tuple[str, str]:
    """Where a case keeps ncf's embeddings and its dense layers."""
    return {"local": (worker, worker), "ps": (ps, ps), "embeddings_on_ps": (ps, worker)}[case]


def step_ops(tf, task: int, num_workers: int) -> dict:
    """Worker `task`'s step op per case, as adrun's runtime builds a synchronous PS step of
    `num_workers` workers (runtime/kernels/gradient_sync.py, `synchronized_apply`): with one worker
    every gradient applied as the plain run does; else the PS variables' gradients pushed into
    their accumulators, the chief taking their means and applying them, then the token queues on
    PS 0. Variables on the worker are its own and updated by it alone."""
    from adrun.runtime.kernels.ps_sync import StepTokens, ps_aggregations

    tf1 = tf.compat.v1
    worker, ps = f"/job:worker/task:{task}", "/job:ps/task:0"
    with tf1.device(worker):
        users = tf1.random.uniform([256], maxval=100_000, dtype=tf.int64)
        items = tf1.random.uniform([256], maxval=20_000, dtype=tf.int64)
        x = tf1.random.normal([64, 8])
    ops = {}
    for index, case in enumerate(CASES):
        with tf1.variable_scope(case):
            if case.startswith("tiny"):
                with tf1.device(ps if case == "tiny_ps" else worker):
                    v = tf1.get_variable("v", [8, 8], initializer=tf1.zeros_initializer(), use_resource=True)
                with tf1.device(worker):
                    loss = tf1.reduce_sum(tf1.matmul(x, v))
            else:
                loss = ncf_loss(tf, users, items, worker, *_place(case, worker, ps))
            with tf1.device(worker):
                optimizer = tf1.train.GradientDescentOptimizer(0.01)
                grads_and_vars = optimizer.compute_gradients(loss, tf1.trainable_variables(f"{case}/"))
            synced = [(g, v) for g, v in grads_and_vars if v.device == ps]
            if num_workers == 1 or not synced:
                ops[case] = optimizer.apply_gradients(grads_and_vars)
                continue
            aggregations = ps_aggregations([(v.op.name, g, 0) for g, v in synced], num_workers, worker)
            tokens = StepTokens(index, num_workers)
            if task == 0:
                means = {name: m for a in aggregations for name, m in a.take_means().items()}
                train = optimizer.apply_gradients([(means.get(v.op.name, g), v) for g, v in grads_and_vars])
                ops[case] = tokens.end_step(0, [train])
            else:
                own = [(g, v) for g, v in grads_and_vars if v.device != ps]
                updates = [optimizer.apply_gradients(own)] if own else []
                ops[case] = tokens.end_step(task, [a.push for a in aggregations] + updates)
    return ops


def _initialize(tf, sess, task: int) -> None:
    """The chief initializes every variable; another worker its own ones, then waits until the
    chief's initialized those on the PS."""
    tf1 = tf.compat.v1
    if task == 0:
        sess.run(tf1.global_variables_initializer())
        return
    own = [v for v in tf1.global_variables() if v.device == f"/job:worker/task:{task}"]
    sess.run(tf1.variables_initializer(own))
    pending = tf1.report_uninitialized_variables([v for v in tf1.global_variables() if v not in own])
    while len(sess.run(pending)):
        time.sleep(0.2)


def _worker(task: int, cluster: dict, steps: int, rounds: int, ps_pid: int) -> list[dict]:
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=task)
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{task}"])
    ops = step_ops(tf, task, len(cluster["worker"]))
    rows = []
    with tf.compat.v1.Session(server.target, config=config) as sess:
        _initialize(tf, sess, task)
        for op in ops.values():
            for _ in range(WARM_UP_STEPS):
                sess.run(op)
        for rnd in range(rounds):
            for case, op in ops.items():
                wall, cpu, ps_cpu = time.perf_counter(), _cpu_s(os.getpid()), _cpu_s(ps_pid)
                for _ in range(steps):
                    sess.run(op)
                row = {"round": rnd, "case": case, "worker": task, "steps": steps,
                       "wall_ms": (time.perf_counter() - wall) / steps * 1e3,
                       "cpu_ms": (_cpu_s(os.getpid()) - cpu) / steps * 1e3, "load_average": os.getloadavg()[0]}
                if task == 0:  # the workers run in lock step: the chief's window is every worker's
                    row["ps_cpu_ms"] = (_cpu_s(ps_pid) - ps_cpu) / steps * 1e3
                rows.append(row)
    return rows


def merged(rows: list[dict]) -> list[dict]:
    """One row per round and case: each worker's CPU ms per step, the PS's, and their sum."""
    out = []
    for rnd in sorted({r["round"] for r in rows}):
        for case in CASES:
            mine = sorted((r for r in rows if r["round"] == rnd and r["case"] == case), key=lambda r: r["worker"])
            if not mine:
                continue
            workers = [r["cpu_ms"] for r in mine]
            ps = mine[0]["ps_cpu_ms"]
            out.append({"round": rnd, "case": case, "wall_ms": mine[0]["wall_ms"], "worker_cpu_ms": workers,
                        "ps_cpu_ms": ps, "total_cpu_ms": sum(workers) + ps, "load_average": mine[0]["load_average"]})
    return out


def synchronization_cpu_ms(results: list[dict]) -> dict[str, list[float]]:
    """Per synchronous case, each round's CPU ms per step over every process beyond its local
    counterpart's in the same round (`BASELINE`): what the step's synchronization costs."""
    total = {(r["round"], r["case"]): r["total_cpu_ms"] for r in results}
    return {case: [total[(rnd, case)] - total[(rnd, base)] for rnd in sorted({r["round"] for r in results})
                   if (rnd, case) in total and (rnd, base) in total]
            for case, base in BASELINE.items()}


def deadline_s(steps: int, rounds: int) -> float:
    """How long a run may take: its start-up, then every worker's steps (warm-up and timed) at
    `STEP_BOUND_S` each, some 7 times the slowest step measured (15 ms wall, n = 3 at load 9)."""
    return START_UP_S + len(CASES) * (WARM_UP_STEPS + rounds * steps) * STEP_BOUND_S


def _ps_command(spec: dict, out: Path) -> list[str]:
    return [sys.executable, "-m", "bench.loopback_ps_step", "--out", str(out), "--ps-task", json.dumps(spec)]


def _worker_command(task: int, spec: dict, steps: int, rounds: int, part: Path, ps_pid: int) -> list[str]:
    return [sys.executable, "-m", "bench.loopback_ps_workers", "--steps", str(steps), "--rounds", str(rounds),
            "--out", str(part), "--task", str(task), "--cluster", json.dumps(spec), "--ps-pid", str(ps_pid)]


def _run(num_workers: int, steps: int, rounds: int, out: Path) -> list[dict]:
    """Starts the PS and the workers, waits for them and returns the workers' rows. A worker that
    fails leaves the others waiting forever (for the chief's initialization, its take, their
    tokens), and so does a PS that ends (its server runs until killed: it ends only by failing,
    e.g. its port taken before it bound it), so either ends the run, and so does the deadline;
    every child is killed on any way out (bench/children.py)."""
    spec = {"worker": [f"127.0.0.1:{_free_port()}" for _ in range(num_workers)], "ps": [f"127.0.0.1:{_free_port()}"]}
    parts = [out.with_suffix(f".worker{i}.tmp") for i in range(num_workers)]
    logs = [*(part.with_suffix(".err") for part in parts), out.with_suffix(".ps.err")]
    with Children() as children:
        ps_pid = children.start("the PS", _ps_command(spec, out), log=logs[-1], role=Role.SERVER).proc.pid
        for i, part in enumerate(parts):
            children.start(f"worker {i}", _worker_command(i, spec, steps, rounds, part, ps_pid), log=logs[i])
        failure = children.wait(deadline_s(steps, rounds), poll_s=0.5)
    if failure:
        raise click.ClickException(str(failure))
    rows = [row for part in parts for row in json.loads(part.read_text())]
    for path in [*parts, *logs]:
        path.unlink()
    return rows


def by_workers(runs: list[dict]) -> dict[str, dict[int, list[float]]]:
    """Per synchronous case and worker count: every round's synchronization CPU ms over `runs`
    (each {"workers": n, "results": [...]}, as this command writes them)."""
    found: dict[str, dict[int, list[float]]] = {case: {} for case in BASELINE}
    for run in runs:
        for case, values in synchronization_cpu_ms(run["results"]).items():
            found[case].setdefault(run["workers"], []).extend(values)
    return found


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """The least-squares line y = s x + i and i's standard error (from the residuals, N - 2 degrees
    of freedom; nan with fewer than 3 points or one x): whether the once-a-step part i is resolved
    from 0 at all, which the fit alone does not say."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan"), float("nan"), float("nan")
    s, i = np.polyfit(x, y, 1)
    if len(x) < 3:
        return float(s), float(i), float("nan")
    residual = y - (s * x + i)
    variance = float(residual @ residual) / (len(x) - 2)
    sxx = float(((x - x.mean()) ** 2).sum())
    return float(s), float(i), float(np.sqrt(variance * (1 / len(x) + x.mean() ** 2 / sxx)))


def summary(runs: list[dict]) -> str:
    """A markdown table: per case and n, the synchronization's CPU ms per step (median, min-max),
    against n times the median at n = 1 (the extrapolation `StepCost.cpu_work_s` makes) and against
    the model's own figure, n (PS_CALL_CPU_S + its pieces); and the least-squares line over n of
    every round, P(n) = n s + i (the mechanism's form: per worker s, once i), with i's standard error
    (the rounds taken as independent, which rounds of one invocation at one load are not quite)."""
    from strategies.cost_model import PS_CALL_CPU_S, PS_DENSE_PIECE_CPU_S, PS_SPARSE_PIECE_CPU_S

    lines = ["| case | n | rounds | CPU ms / step (median, min-max) | / (n x median at n = 1) | model n (call + pieces) "
             "| fit over n: s, i ± se(i) |", "|---|---|---|---|---|---|---|"]
    for case, per_n in by_workers(runs).items():
        sparse, dense = PIECES[case]
        model = 1e3 * (PS_CALL_CPU_S + sparse * PS_SPARSE_PIECE_CPU_S + dense * PS_DENSE_PIECE_CPU_S)
        one = float(np.median(per_n[1])) if 1 in per_n else float("nan")
        points = [(n, v) for n, values in per_n.items() for v in values]
        s, i, se = line_fit([n for n, _ in points], [v for _, v in points])
        for n, values in sorted(per_n.items()):
            median = float(np.median(values))
            lines.append(f"| {case} | {n} | {len(values)} | {median:.2f} ({min(values):.2f}-{max(values):.2f}) | "
                         f"{median / (n * one):.2f} | {n * model:.2f} | {s:.2f}, {i:+.2f} ± {se:.2f} |")
    return "\n".join(lines)


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--workers", "num_workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--steps", type=click.IntRange(min=10), default=1000, show_default=True, help="timed steps per case and round")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="where to write the results")
@click.option("--summarize", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="print the table of a results file's runs (bench/results/loopback-ps-workers.json) and stop")
@click.option("--task", hidden=True, type=int, default=None)
@click.option("--cluster", hidden=True, default=None)
@click.option("--ps-pid", hidden=True, type=int, default=None)
def main(num_workers: int, steps: int, rounds: int, out: Path | None, summarize: Path | None, task: int | None,
         cluster: str | None, ps_pid: int | None) -> None:
    if summarize is not None:
        data = json.loads(summarize.read_text())
        click.echo(summary([run for inv in data.get("invocations", [data]) for run in inv.get("runs", [inv])]))
        return
    if out is None:
        raise click.UsageError("--out is required to run")
    if task is not None:
        rows = _worker(task, json.loads(cluster or "{}"), steps, rounds, ps_pid or 0)
        out.write_text(json.dumps(rows) + "\n")
        return
    results = merged(_run(num_workers, steps, rounds, out))
    for row in results:
        click.echo(f"round {row['round']} {row['case']}: {row['wall_ms']:.3f} ms wall, CPU "
                   f"{' + '.join(f'{c:.2f}' for c in row['worker_cpu_ms'])} (workers) + {row['ps_cpu_ms']:.2f} (PS) = "
                   f"{row['total_cpu_ms']:.2f} ms per step")
    write_invocation(out, results, workers=num_workers)


if __name__ == "__main__":
    main()
