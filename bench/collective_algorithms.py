"""Exact all-reduce algorithms built from TF's own collective ops, timed on shaped namespace hosts.

    sudo .venv/bin/python -m bench.collective_algorithms --iterations 25 \
        --out bench/results/collective-algorithms-4h.json --markdown /tmp/collective-algorithms.md

Why: on the embed workload at 4 hosts (100 Mbit/s links, docs/performance.md "The mixed step's
time, traced") the head's 1.1 MB all-reduce is TF's ring, 2(N - 1) = 6 dependent passes, and about
50 ms of its ~270 ms lie between passes. The same bytes per host (2(N - 1)/N of the buffer) can cross
in fewer dependent phases with other collectives TF runs on CPU over gRPC: this measures whether
they finish sooner on the shaped links. Cases (every one the mean over the 4 workers, checked
against numpy once after warm-up):

- `ring`: CollectiveReduceV2 (RingReduce), what adrun builds today;
- `ring_subdiv2`: the V1 CollectiveReduce with subdiv_offsets [0, 0], TF's ring split into 2N
  fields (with one device per task a subdivision cannot reverse the ring, ring_alg.cc);
- `a2a_gather`: reduce-scatter as CollectiveAllToAllV2 of N slices and a local sum, then
  CollectiveGatherV2 (RingGather, N - 1 passes) of the summed slice;
- `a2a_a2a`: both halves as CollectiveAllToAllV2 (2 phases, N - 1 flows per port each).

Without the rows' pushes beside them: a background of TF sends to the other workers' tasks in
the same collective step was cut by Grappler (a stateless sum only a tf.group waits for), failed
when fetched ("ValidateDevices called before initialization"), and as a stateful op behind an end
barrier hung the step (the workers' collective steps share one step id). One TF worker process per
namespace host (a 4-worker gRPC cluster, worker 0 the collective group leader, as adrun's runtime
makes them); every iteration runs every case once (the order rotating), each behind a one-float
barrier, and worker 0 reads the links' tc tbf counters around it (drops at both ends, bytes out of
each host). A case's time in an iteration is the slowest worker's. Run as root
under the benchmark lock.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from bench.children import Children
from bench.cluster.network import PROFILES, apply_profile
from bench.cluster.results import Profile
from bench.results_log import write_invocation
from bench.sigterm import sigterm_exits

LEADER = "/job:worker/replica:0/task:0"
HEAD_FLOATS = 32 * 512 + 512 + 512 * 512 + 512 + 512 + 1  # the embed workload's head (bench/workloads/models.py)
OP_TIMEOUT_MS = 60_000
RUN_TIMEOUT_S = 1200.0  # all the workers together, one deadline
GROUP_KEY = 1
PORT = 2300
ALGORITHMS = ("ring", "ring_subdiv2", "a2a_gather", "a2a_a2a")


def _ring(tf: Any, x: Any, n: int, key: int) -> Any:
    return tf.raw_ops.CollectiveReduceV2(input=x, group_size=n, group_key=GROUP_KEY, instance_key=key,
                                         ordering_token=[], merge_op="Add", final_op="Div")


def _ring_subdiv2(tf: Any, x: Any, n: int, key: int) -> Any:
    return tf.raw_ops.CollectiveReduce(input=x, group_size=n, group_key=GROUP_KEY, instance_key=key,
                                       merge_op="Add", final_op="Div", subdiv_offsets=[0, 0])


def _scattered_sum(tf: Any, x: Any, n: int, key: int) -> tuple[Any, Any]:
    """This worker's slice of the sum (slice i for worker i), by one all-to-all; and the padding."""
    size = int(x.shape[0])
    pad = -size % n
    slices = tf.reshape(tf.pad(x, [[0, pad]]), [n, (size + pad) // n])
    received = tf.raw_ops.CollectiveAllToAllV2(input=slices, group_size=n, group_key=GROUP_KEY, instance_key=key,
                                               ordering_token=[])
    return tf.reduce_sum(received, axis=0) / n, size


def _a2a_gather(tf: Any, x: Any, n: int, key: int) -> Any:
    mine, size = _scattered_sum(tf, x, n, key)
    every = tf.raw_ops.CollectiveGatherV2(input=mine, group_size=n, group_key=GROUP_KEY, instance_key=key + 1,
                                          ordering_token=[])
    return every[:size]


def _a2a_a2a(tf: Any, x: Any, n: int, key: int) -> Any:
    mine, size = _scattered_sum(tf, x, n, key)
    every = tf.raw_ops.CollectiveAllToAllV2(input=tf.tile(mine[None], [n, 1]), group_size=n, group_key=GROUP_KEY,
                                            instance_key=key + 1, ordering_token=[])
    # TF 2.21 gives a step a collective executor only when its graph holds a collective op it
    # classes as one, which CollectiveAllToAllV2 is not ("Failed to get CollectiveExecutor"):
    # a one-float gather beside it, independent of it, makes the step a collective one
    marker = tf.raw_ops.CollectiveGatherV2(input=tf.zeros([1]), group_size=n, group_key=GROUP_KEY,
                                           instance_key=key + 2, ordering_token=[])
    with tf.control_dependencies([marker]):
        return tf.identity(tf.reshape(every, [-1])[:size])


BUILDERS: dict[str, Callable[[Any, Any, int, int], Any]] = {
    "ring": _ring, "ring_subdiv2": _ring_subdiv2, "a2a_gather": _a2a_gather, "a2a_a2a": _a2a_a2a,
}


def _link_counters(netns: list[str], veths: list[str], root_pid: int) -> tuple[int, int]:
    """Packets the hosts' token buckets dropped so far (both ends of every link), and the bytes the
    hosts' buckets sent out of them (their egress, eth0's qdisc in each namespace)."""
    total = sent = 0
    argvs = [["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", "eth0"] for ns in netns]
    argvs.append(["nsenter", f"--net=/proc/{root_pid}/ns/net", "tc", "-s", "-j", "qdisc", "show"])
    for argv in argvs:
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout
        for qdisc in json.loads(out):
            if qdisc.get("kind") == "tbf" and (argv[1] == "-n" or qdisc.get("dev") in veths):
                total += int(qdisc.get("drops", 0))
                sent += int(qdisc.get("bytes", 0)) if argv[1] == "-n" else 0
    return total, sent


def _worker(index: int, cluster: dict, iterations: int, warmup: int, links: dict) -> list[dict]:
    import numpy as np
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    n = len(cluster["worker"])
    config = tf.compat.v1.ConfigProto()
    config.experimental.collective_group_leader = LEADER
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=index, config=config)
    ops: dict[str, Any] = {}
    with tf.device(f"/job:worker/task:{index}"):
        x = tf.compat.v1.get_variable("head", initializer=np.arange(HEAD_FLOATS, dtype=np.float32) * (index + 1),
                                      use_resource=True)
        value = x.read_value()
        results = {}
        for k, (name, build) in enumerate(BUILDERS.items()):
            results[name] = build(tf, value + 0.0, n, 100 + 10 * k)
            ops[name] = results[name].op
        barrier = tf.raw_ops.CollectiveGatherV2(input=tf.zeros([1]), group_size=n, group_key=GROUP_KEY,
                                                instance_key=99, ordering_token=[]).op
    session_config = tf.compat.v1.ConfigProto()
    session_config.experimental.collective_group_leader = LEADER
    session_config.operation_timeout_in_ms = OP_TIMEOUT_MS  # a wedged collective fails the run
    rows = []
    with tf.compat.v1.Session(server.target, config=session_config) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for op in ops.values():
            for _ in range(warmup):
                sess.run(barrier)
                sess.run(op)
        expected = np.arange(HEAD_FLOATS, dtype=np.float32) * (n + 1) / 2
        sess.run(barrier)
        for name, got in sess.run(results).items():  # every algorithm's mean, against numpy
            if not np.allclose(got, expected, rtol=1e-5):
                raise AssertionError(f"{name} averaged wrongly: max error {np.abs(got - expected).max()}")
        names = list(ops)
        for it in range(iterations):
            for c in range(len(names)):
                case = names[(c + it) % len(names)]
                before = _link_counters(**links) if index == 0 else (0, 0)
                sess.run(barrier)
                start = time.perf_counter()
                sess.run(ops[case])
                ms = (time.perf_counter() - start) * 1e3
                sess.run(barrier)
                after = _link_counters(**links) if index == 0 else None
                rows.append({"iteration": it, "case": case, "worker": index, "ms": ms,
                             "drops": after[0] - before[0] if after else None,
                             "sent_mb": round((after[1] - before[1]) / 1e6, 3) if after else None,
                             "load_average": os.getloadavg()[0]})
    return rows


def _hosts(rows: list[dict]) -> int:
    """How many workers (one per host) the rows come from."""
    return len({r["worker"] for r in rows})


def _summary(rows: list[dict]) -> list[dict]:
    """Per case: the slowest worker's time per iteration, its median and quartiles, drops per run."""
    per: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for row in rows:
        per[(row["case"], row["iteration"])].append(row)
    cases: dict[str, dict[str, list]] = defaultdict(lambda: {"ms": [], "drops": [], "sent_mb": []})
    for (case, _), group in sorted(per.items()):
        cases[case]["ms"].append(max(r["ms"] for r in group))
        cases[case]["drops"].extend(r["drops"] for r in group if r["drops"] is not None)
        cases[case]["sent_mb"].extend(r["sent_mb"] for r in group if r.get("sent_mb") is not None)
    ring = statistics.median(cases["ring"]["ms"]) if "ring" in cases else None
    out = []
    for case, figures in cases.items():
        q = statistics.quantiles(figures["ms"], n=4)
        median = statistics.median(figures["ms"])
        out.append({"case": case, "iterations": len(figures["ms"]), "median_ms": round(median, 1),
                    "q1_ms": round(q[0], 1), "q3_ms": round(q[2], 1),
                    "vs_ring": round(ring / median, 3) if ring else None,
                    "drops_median": statistics.median(figures["drops"]) if figures["drops"] else None,
                    "drops_total": sum(figures["drops"]),
                    "sent_mb_per_host": (round(statistics.median(figures["sent_mb"]) / _hosts(rows), 3)
                                         if figures["sent_mb"] else None)})
    return out


def _markdown(summary: list[dict], facts: dict) -> str:
    lines = [f"`{facts['command']}`, {facts['started']} to {facts['ended']} UTC, load {facts['load_start']} to "
             f"{facts['load_end']}; {facts['hosts']} hosts at {facts['rate_mbit']} Mbit/s, "
             f"{facts['floats']} float32 ({facts['floats'] * 4 / 1e6:.2f} MB).", "",
             "| case | median ms (q1–q3) | ring / case | MB out per host | drops per run, median (total) |",
             "|---|---|---|---|---|"]
    for s in sorted(summary, key=lambda s: s["case"]):
        ratio = "–" if s["vs_ring"] is None else f"{s['vs_ring']:.2f}"
        lines.append(f"| {s['case']} | {s['median_ms']} ({s['q1_ms']}–{s['q3_ms']}) | {ratio} | {s['sent_mb_per_host']} | "
                     f"{s['drops_median']} ({s['drops_total']}) |")
    return "\n".join(lines) + "\n"


def _run_workers(hosts: int, profile: Profile, iterations: int, warmup: int, scratch: Path) -> list[dict]:
    """Runs one worker per namespace host under one deadline and returns their rows; a worker that
    fails ends the wait (the others would block in its collectives), and every worker left is killed
    on any way out (bench/children.py), before the namespace hosts go."""
    from tests.cluster.netns import NetnsCluster

    parts = [scratch / f"worker{i}.json" for i in range(hosts)]
    with NetnsCluster(hosts) as cluster, Children() as children:
        apply_profile(cluster, profile)
        given = {"cluster": {"worker": [f"{h.address}:{PORT}" for h in cluster.hosts]},
                 "links": {"netns": [h.netns for h in cluster.hosts], "veths": [h.veth for h in cluster.hosts],
                           "root_pid": os.getpid()}}
        for i, (host, part) in enumerate(zip(cluster.hosts, parts, strict=True)):
            children.start(f"worker {i}", host.exec_argv(
                sys.executable, "-m", "bench.collective_algorithms", "--iterations", str(iterations), "--warmup", str(warmup),
                "--out", str(part), "--markdown", "-", "--worker", str(i), "--spec", json.dumps(given)),
                log=part.with_suffix(".log"))
        failure = children.wait(RUN_TIMEOUT_S, poll_s=1.0)
    if failure:
        tail = "".join(part.with_suffix(".log").read_text(errors="replace")[-1500:] for part in parts)
        raise click.ClickException(f"{failure}:\n{tail}")
    return [row for part in parts for row in json.loads(part.read_text())]


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--hosts", type=click.IntRange(min=2), default=4, show_default=True)
@click.option("--profile", type=click.Choice(sorted(PROFILES)), default="commodity", show_default=True)
@click.option("--iterations", type=click.IntRange(min=2), default=25, show_default=True, help="timed runs per case")
@click.option("--warmup", type=click.IntRange(min=1), default=5, show_default=True, help="untimed runs per case")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--worker", hidden=True, type=int, default=None)
@click.option("--spec", hidden=True, default=None, help="worker: {cluster, links} as JSON")
def main(hosts: int, profile: str, iterations: int, warmup: int, out: Path, markdown: Path,
         worker: int | None, spec: str | None) -> None:
    if worker is not None:
        given = json.loads(spec or "{}")
        rows = _worker(worker, given["cluster"], iterations, warmup, given["links"])
        out.write_text(json.dumps(rows) + "\n")
        return
    from tests.cluster.netns import missing_requirements

    if (why := missing_requirements()) is not None:
        raise click.ClickException(why)
    started, load_start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), os.getloadavg()[0]
    # a SIGTERM (`timeout 900`) unwinds through the workers' kill and the namespace hosts' teardown
    with sigterm_exits(), tempfile.TemporaryDirectory(prefix="collective-algorithms-") as scratch:
        rows = _run_workers(hosts, PROFILES[profile], iterations, warmup, Path(scratch))
    summary = _summary(rows)
    facts = {"started": started, "ended": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
             "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2), "hosts": hosts,
             "rate_mbit": PROFILES[profile].rate_mbit, "floats": HEAD_FLOATS,
             "command": " ".join(sys.argv)}
    write_invocation(out, rows, **facts, summary=summary)
    text = _markdown(summary, facts)
    markdown.write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()
