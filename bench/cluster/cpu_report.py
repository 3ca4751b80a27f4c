"""CPU seconds per step and process of each benchmark run, from `cpu_sample`'s file and the run's results.

    python -m bench.cluster.cpu_report /tmp/cpu.jsonl bench/results/X.json

A run is the samples in which its workers (the processes of a workload script) are alive, matched
to the results file's runs in their order. Its steady part is where the hosts moved the middle
80 % of the run's bytes between hosts (start-up and the first steps, and the end, left out); its
steps there are those bytes over the run's bytes per step (all it sent over its steps: the
variables' first broadcast is one step's worth at most, under 1 % of a run). Per step in that
part: wall time, CPU seconds of the workers (each worker's own exact figure over its timed steps,
`WorkerResult.cpu_seconds`, where the results have it; else their /proc ticks), PS tasks, softirq
threads and the rest of adrun (/proc), the
machine's busy CPU (user + system + irq + softirq, not `nice`: other users' niced work) and its
idle CPU, and MB sent between hosts. A machine with idle CPU while a step's bytes move is not
bound by its CPUs; CPU seconds per MB say what a byte between hosts costs under each plan.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import click

from .results import BenchResults, RunResult

TICK_S = 1 / os.sysconf("SC_CLK_TCK")  # USER_HZ: /proc counts CPU time in ticks of this many seconds
ROLES = ("worker", "ps", "softirq", "adrun")
BUSY = ("user", "system", "irq", "softirq")


@dataclass(frozen=True)
class RunCpu:
    """One run's steady part, per step."""

    run: RunResult
    steps: float
    step_s: float
    cpu_s: dict[str, float]  # role -> CPU seconds per step
    busy_s: float  # the machine's busy CPU seconds per step (not niced work)
    nice_s: float  # the machine's niced CPU seconds per step (other users)
    idle_s: float  # the machine's idle CPU seconds per step
    mb: float  # MB sent between hosts per step


MIN_RUN_BYTES = 1e6  # a segment moving less is a check before a run (the workload script started briefly), not a run


def segments(samples: list[dict]) -> list[list[dict]]:
    """The samples of each run, in order: consecutive samples in which the same worker processes
    are alive (a run's workers start and end together), of runs that moved MIN_RUN_BYTES at least."""
    runs: list[list[dict]] = []
    current: frozenset[str] = frozenset()
    for s in samples:
        workers = frozenset(pid for pid, (kind, _) in s["procs"].items() if kind == "worker")
        if workers and workers & current:
            runs[-1].append(s)
            current |= workers
        elif workers:
            runs.append([s])
            current = workers
        else:
            current = frozenset()
    return [r for r in runs if r[-1]["sent"] - r[0]["sent"] >= MIN_RUN_BYTES]


def steady(run: RunResult, samples: list[dict], share: float = 0.8) -> RunCpu | None:
    """`run`'s per-step figures over the samples in which the middle `share` of its bytes moved."""
    sent = [s["sent"] for s in samples]
    total = sent[-1] - sent[0]
    if total <= 0 or len(samples) < 3:
        return None
    lo, hi = sent[0] + total * (1 - share) / 2, sent[0] + total * (1 + share) / 2
    first = next(i for i, b in enumerate(sent) if b >= lo)
    last = next(i for i, b in enumerate(sent) if b >= hi)
    if last <= first:
        return None
    a, b = samples[first], samples[last]
    steps = (b["sent"] - a["sent"]) / (total / run.steps)
    cpu: dict[str, float] = defaultdict(float)
    for pid, (kind, ticks) in b["procs"].items():
        before = a["procs"].get(pid, (kind, 0))[1]  # a process started inside the window: all of its ticks
        cpu[kind] += (ticks - before) * TICK_S / steps
    if run.workers and all(w.cpu_seconds is not None for w in run.workers):
        cpu["worker"] = sum(w.cpu_seconds / w.steps for w in run.workers if w.cpu_seconds is not None)
    machine = {k: (b["cpu"][k] - a["cpu"][k]) * TICK_S / steps for k in b["cpu"]}
    return RunCpu(run, steps, (b["t"] - a["t"]) / steps, {k: cpu.get(k, 0.0) for k in ROLES},
                  sum(machine[k] for k in BUSY), machine["nice"], machine["idle"] + machine["iowait"],
                  (b["sent"] - a["sent"]) / steps / 1e6)


def report(samples: list[dict], results: BenchResults) -> list[RunCpu | None]:
    """Each run of `results` (in order) beside its steady part's figures; None where the samples
    show no bytes for it. A UsageError when the samples hold a different number of runs."""
    parts = segments(samples)
    if len(parts) != len(results.runs):
        raise click.UsageError(f"the samples show {len(parts)} runs, the results {len(results.runs)}: "
                               "sample the whole invocation, and only it")
    return [steady(run, part) for run, part in zip(results.runs, parts, strict=True)]


def table(rows: list[RunCpu | None]) -> str:
    lines = ["| system | workload | hosts | steps | step ms | workers | PS | softirq | adrun | busy | niced | idle "
             "| MB between hosts | busy CPU-ms per MB |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r is None:
            continue
        c = r.run.config
        ms = {k: v * 1000 for k, v in r.cpu_s.items()}
        lines.append(f"| {c.label} | {c.workload} | {c.hosts} | {r.steps:.0f} | {r.step_s * 1000:.1f} | "
                     f"{ms['worker']:.1f} | {ms['ps']:.1f} | {ms['softirq']:.1f} | {ms['adrun']:.1f} | "
                     f"{r.busy_s * 1000:.1f} | {r.nice_s * 1000:.1f} | {r.idle_s * 1000:.1f} | {r.mb:.2f} | "
                     f"{r.busy_s * 1000 / r.mb if r.mb else float('nan'):.2f} |")
    return "\n".join(lines)


@click.command(help=__doc__.split("\n\n")[0])
@click.argument("samples", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def main(samples: Path, results: Path) -> None:
    loaded = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    click.echo(table(report(loaded, BenchResults.model_validate_json(results.read_text()))))


if __name__ == "__main__":
    main()
