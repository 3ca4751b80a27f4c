"""What pooling the bags on the PS would save the embed workload: rows against per-example partial sums.

As root (it makes network namespaces and shapes their links):

    flock /work/wt/bench.lock timeout 900 .venv/bin/python -m bench.pooled_lookup \\
        --out bench/results/pooled-lookup.json --markdown /tmp/pooled-lookup.md

Plain TensorFlow (no adrun) on 4 network-namespace hosts shaped like the benchmark's commodity
profile (tests/cluster/netns.py, bench/cluster/network.py), one worker and one PS task per host,
between-graph replication, the embed workload's model (bench/workloads/models.py `Embed`: bags of
32 uniform ids into a 1 M x 32 table sharded by contiguous rows over the PS tasks, mean-pooled,
a 1.1 MB MLP head, plain SGD). Two variants of one exactly synchronous step, built side by side
in each worker's graph on tables and heads of equal initial values:

- `rows`: the worker gathers its batch's distinct ids' rows from each shard, pools them itself,
  and pushes per shard one gradient row per distinct id (the rows' sums, as adrun's
  distinct_rows.py does);
- `pooled`: each shard returns per example the sum of its rows in the bag ([batch, dim]); the
  worker adds the partials and divides by the bag; backward it pushes d(sum) ([batch, dim], the
  same tensor to every shard), which each shard expands to its rows by the example indices it
  received for the pull and scatter-subtracts.

Both: the head's gradient averaged by one CollectiveReduceV2 among the workers, applied locally;
each worker subtracts lr / N times its own embedding gradient on the shards (for plain SGD the
sum over workers of these is the synchronous update lr * mean); the pushes wait for the head's
all-reduce (so every worker's pulls of the step are done before any shard changes) and the step
ends with a one-number all-reduce after the pushes (so the next step's pulls see every push).
The variants run in interleaved blocks; the chief asserts that both reach the same parameters
after the warm-up's steps and reports their difference at the end.
Each worker reads its host namespace's eth0 counters (/proc/net/dev) around every block.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from bench.children import Children, Role
from bench.paths import REPO
from bench.results_log import write_invocation
from bench.sigterm import sigterm_exits

# `+pshead`: the head cut on axis 0 over the PS tasks, as PartitionedPS holds it, instead of all-reduced
VARIANTS = ("rows", "pooled", "rows+pshead", "pooled+pshead")
PAIRS = (("rows", "pooled"), ("rows+pshead", "pooled+pshead"))  # equal mathematics, compared after the warm-up
PS_PORT, WORKER_PORT = 2240, 2241
LEADER = "/job:worker/replica:0/task:0"
HEAD_GROUP = 1
HEAD_KEY = {"rows": 11, "pooled": 21, "rows+pshead": 41, "pooled+pshead": 51}
BARRIER_KEY = {"rows": 12, "pooled": 22, "rows+pshead": 42, "pooled+pshead": 52, "setup": 31}
# max |rows - pooled| of any parameter after the warm-up's steps: float summation order only. Later
# the difference grows with the steps as any float difference does in this model: one step of the
# rows variant from a head nudged by 1e-7 (relative) drifts from the unnudged one as far, 1.2e-5 after
# 64 steps and 1.4e-3 after 208 (one process, one worker; docs/performance.md), so the run's end is
# reported, not asserted.
TOLERANCE = 1e-6
# a worker's session call (a step, the set-up barrier while the chief initializes) that takes longer
# fails the run: a wedged collective or PS call ends it instead of waiting for the parent's deadline
OP_TIMEOUT_MS = 60_000
POOL_BATCHES = 8
SEED = 1


@dataclass(frozen=True)
class Model:
    """The embed workload's sizes (bench/workloads/models.py `Embed`)."""

    vocab: int = 1_000_000
    dim: int = 32
    bag: int = 32
    hidden: int = 512
    batch: int = 256
    lr: float = 0.1


# -- the step, buildable on any devices (the unit test builds it on one CPU) --------------------------

def head_initial_values(model: Model, seed: int = SEED) -> list[np.ndarray]:
    """Glorot-uniform kernels and zero biases of the 32 -> 512 -> 512 -> 1 head, the same on every worker."""
    rng = np.random.default_rng(seed)
    shapes = [(model.dim, model.hidden), (model.hidden,), (model.hidden, model.hidden), (model.hidden,), (model.hidden, 1), (1,)]
    values = []
    for shape in shapes:
        if len(shape) == 1:
            values.append(np.zeros(shape, np.float32))
        else:
            limit = np.sqrt(6.0 / sum(shape))
            values.append(rng.uniform(-limit, limit, shape).astype(np.float32))
    return values


def make_tables(tf: Any, tag: str, model: Model, ps_devices: Sequence[str]) -> list[Any]:
    """The table's row shards, shard s on ps_devices[s], initial values normal(0, 0.05) from a
    stateless seed per shard: equal for every tag."""
    rows = model.vocab // len(ps_devices)
    tables = []
    for s, device in enumerate(ps_devices):
        with tf.device(device):
            initial = 0.05 * tf.random.stateless_normal([rows, model.dim], seed=[SEED, s])
            tables.append(tf.Variable(initial, name=f"{tag.replace('+', '_')}/embedding_{s}"))
    return tables


def rows_lookup(tf: Any, ids: Any, tables: Sequence[Any], ps_devices: Sequence[str], worker: str,
                model: Model) -> tuple[Any, Callable[[Any, float], list[Any]]]:
    """Pooled embeddings [batch, dim] from the distinct ids' rows gathered on the shards, and a
    function (loss, scale) -> the pushes: per shard, one summed gradient row per distinct id."""
    rows_per_shard = model.vocab // len(tables)
    with tf.device(worker):
        unique, positions = tf.unique(tf.reshape(ids, [-1]))
        where = tf.dynamic_partition(tf.range(tf.size(unique)), tf.cast(unique // rows_per_shard, tf.int32), len(tables))
        local = [tf.gather(unique, where[s]) - s * rows_per_shard for s in range(len(tables))]
    gathered = []
    for s, (table, device) in enumerate(zip(tables, ps_devices, strict=True)):
        with tf.device(device):
            gathered.append(tf.gather(table, local[s]))
    with tf.device(worker):
        distinct_rows = tf.dynamic_stitch(where, gathered)
        pooled = tf.reduce_mean(tf.reshape(tf.gather(distinct_rows, positions), [-1, model.bag, model.dim]), axis=1)

    def pushes(loss: Any, scale: float) -> list[Any]:
        with tf.device(worker):
            grads = [tf.convert_to_tensor(g) * scale for g in tf.gradients(loss, gathered)]
        ops = []
        for s, (table, device) in enumerate(zip(tables, ps_devices, strict=True)):
            with tf.device(device):
                ops.append(table.scatter_sub(tf.IndexedSlices(grads[s], local[s])).op)
        return ops

    return pooled, pushes


def pooled_lookup(tf: Any, ids: Any, tables: Sequence[Any], ps_devices: Sequence[str], worker: str,
                  model: Model) -> tuple[Any, Callable[[Any, float], list[Any]]]:
    """Pooled embeddings [batch, dim] as the sum of each shard's per-example partial sums over the
    bag size, and a function (loss, scale) -> the pushes: d(sum) [batch, dim] to every shard, which
    gathers it by its ids' example indices and scatter-subtracts it from its rows."""
    rows_per_shard = model.vocab // len(tables)
    with tf.device(worker):
        flat = tf.reshape(ids, [-1])
        shard = tf.cast(flat // rows_per_shard, tf.int32)
        local = tf.dynamic_partition(flat - tf.cast(shard, flat.dtype) * rows_per_shard, shard, len(tables))
        example = tf.dynamic_partition(tf.range(tf.size(flat)) // model.bag, shard, len(tables))
        batch = tf.shape(ids)[0]
    partials = []
    for s, (table, device) in enumerate(zip(tables, ps_devices, strict=True)):
        with tf.device(device):
            partials.append(tf.math.unsorted_segment_sum(tf.gather(table, local[s]), example[s], batch))
    with tf.device(worker):
        summed = tf.add_n(partials)
        pooled = summed / model.bag

    def pushes(loss: Any, scale: float) -> list[Any]:
        with tf.device(worker):
            [d_sum] = tf.gradients(loss, [summed])
            d_sum = d_sum * scale
        ops = []
        for s, (table, device) in enumerate(zip(tables, ps_devices, strict=True)):
            with tf.device(device):
                ops.append(table.scatter_sub(tf.IndexedSlices(tf.gather(d_sum, example[s]), local[s])).op)
        return ops

    return pooled, pushes


LOOKUPS = {"rows": rows_lookup, "pooled": pooled_lookup}


@dataclass
class Step:
    """One variant's graph: its tables, its head's values, and the op that runs one synchronous step."""

    tables: list[Any]
    head: list[Any]  # the head's variables' values, whole
    train: Any
    loss: Any
    local_variables: list[Any]  # initialized by every worker
    shared_variables: list[Any]  # on the PS tasks: initialized by the chief


def _head_on_ps(tf: Any, variant: str, model: Model, ps_devices: Sequence[str]) -> tuple[list[Any], list[list[Any]]]:
    """The head's variables cut on axis 0 into one piece per PS task (PartitionedPS's cut; a
    variable of fewer rows than tasks stays whole on task i mod P): (whole values, pieces per variable)."""
    values, pieces = [], []
    for i, initial in enumerate(head_initial_values(model)):
        parts = np.array_split(initial, len(ps_devices)) if initial.shape[0] >= len(ps_devices) else [initial]
        mine = []
        for j, part in enumerate(parts):
            with tf.device(ps_devices[(i + j) % len(ps_devices)]):
                mine.append(tf.Variable(part, name=f"{variant.replace('+', '_')}/head_{i}_{j}"))
        pieces.append(mine)
        values.append(tf.concat([p.read_value() for p in mine], axis=0) if len(mine) > 1 else mine[0].read_value())
    return values, pieces

def build_step(tf: Any, variant: str, ids: Any, labels: Any, model: Model, ps_devices: Sequence[str], worker: str,
               num_workers: int, all_reduce: Callable[[Any, int], Any] | None) -> Step:
    """The variant's step. `all_reduce(tensor, instance_key)` averages over the workers (None: one
    worker, no collective); it orders the pushes after every worker's forward pass and ends the step."""
    lookup, _, head_place = variant.partition("+")
    tables = make_tables(tf, variant, model, ps_devices)
    if head_place == "pshead":
        head, pieces = _head_on_ps(tf, variant, model, ps_devices)
        local, shared = [], [p for ps in pieces for p in ps]
    else:
        with tf.device(worker):
            local = [tf.Variable(v, name=f"{variant}/head_{i}") for i, v in enumerate(head_initial_values(model))]
        head, shared = local, []
    pooled, pushes = LOOKUPS[lookup](tf, ids, tables, ps_devices, worker, model)
    with tf.device(worker):
        k1, b1, k2, b2, k3, b3 = head
        x = tf.nn.relu(tf.matmul(pooled, k1) + b1)
        x = tf.nn.relu(tf.matmul(x, k2) + b2)
        logit = tf.squeeze(tf.matmul(x, k3) + b3, axis=1)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
    if head_place == "pshead":
        # every worker subtracts lr / N of its own gradient from each piece, once every worker's
        # forward pass has read the pieces (a one-number all-reduce after the gradients)
        with tf.device(worker):
            grads = [g * (model.lr / num_workers) for g in tf.gradients(loss, shared)]
            mean = all_reduce(tf.zeros([1]), HEAD_KEY[variant]) if all_reduce else tf.group(grads)
        updates = []
        for piece, g in zip(shared, grads, strict=True):
            with tf.device(piece.device), tf.control_dependencies([mean]):
                updates.append(piece.assign_sub(g).op)
    else:
        with tf.device(worker):
            grads = tf.gradients(loss, head)
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)
            mean = all_reduce(flat, HEAD_KEY[variant]) if all_reduce else flat
            sizes = [int(np.prod(v.shape)) for v in head]
            updates = [v.assign_sub(model.lr * tf.reshape(g, v.shape)).op
                       for v, g in zip(head, tf.split(mean, sizes), strict=True)]
    with tf.control_dependencies([mean]):
        table_updates = pushes(loss, model.lr / num_workers)
    with tf.device(worker), tf.control_dependencies(updates + table_updates):
        done = all_reduce(tf.zeros([1]), BARRIER_KEY[variant]) if all_reduce else tf.no_op()
    return Step(tables, head, done, loss, local, tables + shared)


def max_differences(tf: Any, a: Step, b: Step, ps_devices: Sequence[str], worker: str) -> tuple[Any, Any]:
    """max |a - b| over the tables (each shard's computed on its PS, one number crossing) and over the head."""
    shard_diffs = []
    for ta, tb, device in zip(a.tables, b.tables, ps_devices, strict=True):
        with tf.device(device):
            shard_diffs.append(tf.reduce_max(tf.abs(ta - tb)))
    with tf.device(worker):
        head = tf.reduce_max([tf.reduce_max(tf.abs(x - y)) for x, y in zip(a.head, b.head, strict=True)])
        return tf.reduce_max(shard_diffs), head


# -- summaries (pure) -----------------------------------------------------------------------------

def parse_net_dev(text: str, interface: str = "eth0") -> tuple[int, int]:
    """(bytes sent, bytes received) of `interface` in /proc/net/dev's text."""
    for line in text.splitlines():
        name, sep, fields = line.partition(":")
        if sep and name.strip() == interface:
            values = fields.split()
            return int(values[8]), int(values[0])
    raise ValueError(f"no interface {interface!r} in /proc/net/dev")


def summarize(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant and repetition: the median step ms (all workers' timed steps) and the mean bytes
    sent per host and step; per repetition the step ratios of rows to pooled (head all-reduced, head
    on the PSs) and of the head on the PSs to the head all-reduced; medians over repetitions."""
    reps = sorted({b["rep"] for b in blocks})
    table: dict[str, dict[str, list[float]]] = {v: {"step_ms": [], "sent_mb": [], "received_mb": []} for v in VARIANTS}
    for rep in reps:
        for variant in VARIANTS:
            mine = [b for b in blocks if b["rep"] == rep and b["variant"] == variant]
            if not mine:
                raise ValueError(f"repetition {rep} has no {variant} block")
            table[variant]["step_ms"].append(statistics.median(ms for b in mine for ms in b["step_ms"]))
            table[variant]["sent_mb"].append(statistics.mean(b["sent"] / len(b["step_ms"]) for b in mine) / 1e6)
            table[variant]["received_mb"].append(statistics.mean(b["received"] / len(b["step_ms"]) for b in mine) / 1e6)
    ratios = {f"{a} / {b}": [x / y for x, y in zip(table[a]["step_ms"], table[b]["step_ms"], strict=True)]
              for a, b in (*PAIRS, ("rows+pshead", "rows"), ("pooled+pshead", "pooled"))}
    return {"repetitions": reps, "per_repetition": table,
            "median": {v: {k: statistics.median(xs) for k, xs in table[v].items()} for v in VARIANTS},
            "step_ratios": ratios, "step_ratio_medians": {k: statistics.median(xs) for k, xs in ratios.items()}}


def markdown(summary: dict[str, Any], command: str, facts: dict[str, Any]) -> str:
    """A readable table of `summary`, with the command and the invocation's facts."""
    lines = [f"`{command}`", "", f"{facts['start']} to {facts['end']} UTC, load {facts['load_start']:.2f} → {facts['load_end']:.2f}",
             f"max |rows − pooled| (either head) after the warm-up: tables {facts['checks'][0]['table_diff']:.1e}, head "
             f"{facts['checks'][0]['head_diff']:.1e}; after the run: {facts['table_diff']:.1e}, {facts['head_diff']:.1e}", "",
             "| variant | median step ms (per rep) | MB sent per host and step (per rep) |", "|---|---|---|"]
    for v in VARIANTS:
        per = summary["per_repetition"][v]
        lines.append(f"| {v} | {summary['median'][v]['step_ms']:.0f} ({', '.join(f'{x:.0f}' for x in per['step_ms'])}) | "
                     f"{summary['median'][v]['sent_mb']:.2f} ({', '.join(f'{x:.2f}' for x in per['sent_mb'])}) |")
    lines.append("")
    for name, ratios in summary["step_ratios"].items():
        per = ", ".join(f"{r:.2f}" for r in ratios)
        lines.append(f"- step time {name}: {summary['step_ratio_medians'][name]:.2f} by medians ({per})")
    return "\n".join(lines) + "\n"


# -- one task ---------------------------------------------------------------------------------------

def _net_counters() -> tuple[int, int]:
    return parse_net_dev(Path("/proc/net/dev").read_text())


def _worker_data(model: Model, worker: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([SEED, worker])
    ids = rng.integers(0, model.vocab, (POOL_BATCHES * model.batch, model.bag), dtype=np.int64)
    return ids, (ids.sum(axis=1) % 2).astype(np.float32)


def cluster_spec(addresses: Sequence[str]) -> dict[str, list[str]]:
    """One PS task and one worker on each address (a host of its own: the ports are the same)."""
    return {"ps": [f"{a}:{PS_PORT}" for a in addresses], "worker": [f"{a}:{WORKER_PORT}" for a in addresses]}


def _run_worker(index: int, spec: dict[str, list[str]], steps: int, warmup: int, reps: int, out: Path) -> None:
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    model, n = Model(), len(spec["worker"])
    cluster = tf.train.ClusterSpec(spec)
    config = tf.compat.v1.ConfigProto()
    config.experimental.collective_group_leader = LEADER
    server = tf.distribute.Server(cluster, job_name="worker", task_index=index, config=config)
    worker, ps = f"/job:worker/task:{index}", [f"/job:ps/task:{s}" for s in range(n)]

    def all_reduce(tensor: Any, key: int) -> Any:
        return tf.raw_ops.CollectiveReduceV2(input=tensor, group_size=n, group_key=HEAD_GROUP, instance_key=key,
                                             ordering_token=[], merge_op="Add", final_op="Div")

    with tf.device(worker):
        ids = tf.compat.v1.placeholder(tf.int64, [model.batch, model.bag])
        labels = tf.compat.v1.placeholder(tf.float32, [model.batch])
        setup_barrier = all_reduce(tf.zeros([1]), BARRIER_KEY["setup"])
    built = {v: build_step(tf, v, ids, labels, model, ps, worker, n, all_reduce) for v in VARIANTS}
    differences = {f"{a} vs {b}": max_differences(tf, built[a], built[b], ps, worker) for a, b in PAIRS}
    session_config = tf.compat.v1.ConfigProto()
    session_config.CopyFrom(config)
    session_config.device_filters.extend(["/job:ps", worker])
    session_config.operation_timeout_in_ms = OP_TIMEOUT_MS
    data_ids, data_labels = _worker_data(model, index)
    done = dict.fromkeys(VARIANTS, 0)
    blocks, checks = [], []
    with tf.compat.v1.Session(server.target, config=session_config) as sess:
        sess.run([v.initializer for s in built.values() for v in s.local_variables])
        if index == 0:
            sess.run([v.initializer for s in built.values() for v in s.shared_variables])
        sess.run(setup_barrier)

        def block(variant: str, count: int) -> list[float]:
            times = []
            for _ in range(count):
                i = done[variant] % POOL_BATCHES
                feed = {ids: data_ids[i * model.batch:(i + 1) * model.batch],
                        labels: data_labels[i * model.batch:(i + 1) * model.batch]}
                start = time.perf_counter()
                sess.run(built[variant].train, feed)
                times.append((time.perf_counter() - start) * 1e3)
                done[variant] += 1
            return times

        def check(when: str) -> None:
            if index == 0:
                pairs = {k: [float(x) for x in v] for k, v in sess.run(differences).items()}
                checks.append({"after": when, "steps": dict(done), "pairs": pairs,
                               "table_diff": max(t for t, _ in pairs.values()), "head_diff": max(h for _, h in pairs.values())})

        for variant in VARIANTS:
            block(variant, warmup)
        check("warm-up")
        for rep in range(reps):
            for variant in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:
                sent, received = _net_counters()
                times = block(variant, steps)
                sent_after, received_after = _net_counters()
                blocks.append({"rep": rep, "variant": variant, "worker": index, "step_ms": times,
                               "sent": sent_after - sent, "received": received_after - received,
                               "load_average": os.getloadavg()[0]})
        check("run")
    out.write_text(json.dumps({"blocks": blocks, "checks": checks}) + "\n")


def _run_ps(index: int, spec: dict[str, list[str]]) -> None:
    import tensorflow as tf
    tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="ps", task_index=index).join()


# -- the invocation ---------------------------------------------------------------------------------

def _utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def _measure(hosts: int, rate_mbit: int, steps: int, warmup: int, reps: int, timeout_s: float, scratch: Path) -> dict[str, Any]:
    """Runs a PS task and a worker on each namespace host and returns the workers' blocks and the
    chief's checks. A PS task that ends (the workers would wait for it until the deadline) or a
    worker that fails ends the run; every task is stopped before the hosts go (bench/children.py)."""
    from bench.cluster.network import PROFILES, apply_profile
    from tests.cluster.netns import NetnsCluster
    profile = next(p for p in PROFILES.values() if p.rate_mbit == rate_mbit)
    with NetnsCluster(hosts) as cluster, Children() as children:
        apply_profile(cluster, profile)
        spec = json.dumps(cluster_spec([h.address for h in cluster.hosts]))

        def start(host: Any, job: str, i: int, *extra: str, role: Role = Role.WAITED) -> None:
            argv = host.exec_argv(sys.executable, "-m", "bench.pooled_lookup", "--role", job, "--task", str(i),
                                  "--cluster", spec, *extra)
            children.start(f"{job}{i}", argv, log=scratch / f"{job}{i}.log", role=role, cwd=REPO)

        for i, host in enumerate(cluster.hosts):
            start(host, "ps", i, "--out", os.devnull, "--markdown", os.devnull, role=Role.SERVER)
        for i, host in enumerate(cluster.hosts):
            start(host, "worker", i, "--steps", str(steps), "--warmup", str(warmup), "--reps", str(reps),
                  "--out", str(scratch / f"w{i}.json"), "--markdown", os.devnull)
        failure = children.wait(timeout_s, poll_s=1.0)
    if failure:
        tail = "".join((scratch / f"{role}{i}.log").read_text(errors="replace")[-1500:]
                       for role in ("ps", "worker") for i in range(hosts))
        raise click.ClickException(f"{failure}:\n{tail}")
    per_worker = [json.loads((scratch / f"w{i}.json").read_text()) for i in range(hosts)]
    return {"blocks": [b for w in per_worker for b in w["blocks"]], "checks": per_worker[0]["checks"]}


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--hosts", "host_count", type=click.IntRange(min=2), default=4, show_default=True)
@click.option("--rate-mbit", type=click.Choice(["100", "1000"]), default="100", show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=40, show_default=True, help="timed steps per block")
@click.option("--warmup", type=click.IntRange(min=1), default=8, show_default=True, help="untimed steps per variant first")
@click.option("--reps", type=click.IntRange(min=1), default=4, show_default=True, help="interleaved repetitions")
@click.option("--timeout", "timeout_s", type=float, default=780.0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--role", hidden=True, type=click.Choice(["ps", "worker"]), default=None)
@click.option("--task", hidden=True, type=int, default=0)
@click.option("--cluster", "spec", hidden=True, default=None, help="the cluster spec as JSON, for --role")
def main(host_count: int, rate_mbit: str, steps: int, warmup: int, reps: int, timeout_s: float, out: Path,
         markdown_path: Path, role: str | None, task: int, spec: str | None) -> None:
    if role is not None:
        cluster = json.loads(spec or "{}")
        if role == "ps":
            _run_ps(task, cluster)
        else:
            _run_worker(task, cluster, steps, warmup, reps, out)
        return
    from tests.cluster.netns import missing_requirements
    if (why := missing_requirements()) is not None:
        raise click.ClickException(why)
    facts: dict[str, Any] = {"start": _utc(), "load_start": os.getloadavg()[0], "hosts": host_count,
                             "rate_mbit": int(rate_mbit), "steps": steps, "warmup": warmup, "model": Model().__dict__}
    # a SIGTERM (`timeout 900`) unwinds through _measure's `finally` and the namespace hosts' teardown
    with sigterm_exits(), tempfile.TemporaryDirectory(prefix="pooled-lookup-") as scratch:
        measured = _measure(host_count, int(rate_mbit), steps, warmup, reps, timeout_s, Path(scratch))
    [warm, end] = measured["checks"]
    facts |= {"end": _utc(), "load_end": os.getloadavg()[0], "checks": measured["checks"],
              "table_diff": end["table_diff"], "head_diff": end["head_diff"]}
    summary = summarize(measured["blocks"])
    write_invocation(out, measured["blocks"], **facts, summary=summary)
    text = markdown(summary, " ".join(sys.argv), facts)
    markdown_path.write_text(text)
    click.echo(text)
    if warm["table_diff"] > TOLERANCE or warm["head_diff"] > TOLERANCE:
        raise click.ClickException(f"rows and pooled differ beyond {TOLERANCE} after the warm-up: {warm}")


if __name__ == "__main__":
    main()
