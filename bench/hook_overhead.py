"""adrun's own per-step cost: one script run plainly and under adrun with nothing to synchronize.

Runs the benchmark's sparse workload, bench/workloads/sparse.py (or `--script`, another workload
of bench/workloads), with plain python and under `adrun --spec <1 worker, 0 PS> --strategy
AllReduce`, alternately (the order flips every round, so a drift in the machine's load falls on
both sides), `--rounds` times each. Each run times its own steps after its warm-up and writes its
result file (examples/s and the process's CPU seconds over the timed steps): the same clocks on
both sides (adrun's start-up and capture are outside them). Writes the runs and medians as JSON
(`--out`), then prints a table: the ratio of the medians, and the median of each round's own ratio
(a round's two runs saw about the same load). On a shared machine absolute numbers are noise:
compare the ratios of one interleaved run. There, CPU time per step is the steadier measure of
adrun's own work: the kernel shares a loaded CPU per thread, so a process with more threads gets
more of it, and wall-clock throughput says as much about thread counts as about work.

TF2 mode is measured the same way with a Keras 3 workload, bench/workloads/keras_fit.py --model dense
(the dense model's `model.fit`): under adrun its optimizer applies go through TF2 mode's hook, with one
worker nothing to reduce (docs/performance.md, "TF2 mode").

    .venv/bin/python -m bench.hook_overhead [--rounds 5] [--steps 600] [--warmup 100] [--out FILE]
    .venv/bin/python -m bench.hook_overhead --script bench/workloads/keras_fit.py --model dense --steps 200 --warmup 20 \
        --out bench/results/hook_overhead_tf2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a file (`python bench/hook_overhead.py`): `bench` is no package to import from
    sys.exit("run from the repository root as python -m bench.hook_overhead")

from rich.console import Console
from rich.table import Table

from bench.paths import BENCH, REPO, WORKLOADS_DIR

SPEC = "version: 1\nnodes:\n  - address: localhost\n    workers: 1\n    ps: 0\n"


def _result(path: Path, what: str) -> dict[str, float]:
    """{"examples_per_s", "cpu_us_per_step"} from a workload's result file (bench/workloads/harness.py)."""
    if not path.exists():
        raise RuntimeError(f"{what}: the script wrote no result file {path}")
    result = json.loads(path.read_text())
    return {"examples_per_s": result["examples_per_s"], "cpu_us_per_step": result["cpu_seconds"] / result["steps"] * 1e6}


def run_plain(script: Path, script_args: list[str], result: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, str(script), *script_args, "--result-file", str(result)],
                          capture_output=True, text=True, cwd=REPO, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"plain run exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return _result(result, "plain run")


def run_adrun(script: Path, script_args: list[str], work: Path, result: Path) -> dict[str, float]:
    spec, logs = work / "cluster.yml", work / "logs"
    spec.write_text(SPEC)
    proc = subprocess.run(
        [sys.executable, "-m", "adrun", "--spec", str(spec), "--strategy", "AllReduce", "--quiet",
         "--log-dir", str(logs), str(script), *script_args, "--result-file", str(result)],
        capture_output=True, text=True, cwd=REPO, timeout=1800, stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"adrun run exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}")
    return _result(result, "adrun run")


MEASURES = {"examples_per_s": "examples/s", "cpu_us_per_step": "CPU µs/step"}


def summarize(runs: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """Per measure: each side's median, the ratio of the medians, the median of per-round ratios."""
    medians = {}
    for key in MEASURES:
        plain, adrun = ([r[key] for r in runs[side]] for side in ("plain", "adrun"))
        medians[f"plain_{key}"] = statistics.median(plain)
        medians[f"adrun_{key}"] = statistics.median(adrun)
        medians[f"ratio_{key}"] = medians[f"adrun_{key}"] / medians[f"plain_{key}"]
        medians[f"round_ratio_{key}"] = statistics.median(a / p for a, p in zip(adrun, plain, strict=True))
    return medians


def print_table(script: str, rounds: int, medians: dict[str, float]) -> None:
    table = Table(title=f"hook overhead of {script}: 1 worker, 0 PS; medians of {rounds} interleaved rounds")
    for column in ("", "plain", "adrun", "adrun / plain", "per-round ratio"):
        table.add_column(column, justify="right")
    for key, label in MEASURES.items():
        table.add_row(label, f"{medians[f'plain_{key}']:,.0f}", f"{medians[f'adrun_{key}']:,.0f}",
                      f"{medians[f'ratio_{key}']:.3f}", f"{medians[f'round_ratio_{key}']:.3f}")
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each side (at least 5 for a median)")
    parser.add_argument("--steps", type=int, default=600, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=100, help="untimed steps first")
    parser.add_argument("--script", type=Path, default=WORKLOADS_DIR / "sparse.py",
                        help="a workload script of bench/workloads (it writes --result-file)")
    parser.add_argument("--model", help="the model of bench/workloads/keras_fit.py (dense, sparse, ncf, transformer)")
    parser.add_argument("--out", type=Path, default=BENCH / "hook_overhead.json")
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--rounds and --steps must be at least 1, --warmup at least 0")
    script_args = ["--steps", str(args.warmup + args.steps), "--warmup", str(args.warmup)]  # its --steps counts the warm-up
    script_args += ["--model", args.model] if args.model else []
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "adrun": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = ("plain", "adrun") if round_ % 2 == 0 else ("adrun", "plain")
            for side in order:
                result_file = Path(tmp) / f"{side}-{round_}.json"
                result = run_plain(args.script, script_args, result_file) if side == "plain" else \
                    run_adrun(args.script, script_args, Path(tmp), result_file)
                runs[side].append(result)
                print(f"round {round_ + 1}/{args.rounds} {side:5s} {result['examples_per_s']:9,.0f} examples/s "
                      f"{result['cpu_us_per_step']:8,.0f} CPU µs/step", file=sys.stderr, flush=True)
    medians = summarize(runs)
    script = str(args.script.relative_to(REPO) if args.script.is_relative_to(REPO) else args.script)
    args.out.write_text(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "script": script,
        "steps": args.steps, "warmup": args.warmup, "medians": medians, "runs": runs,
    }, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    print_table(script, args.rounds, medians)


if __name__ == "__main__":
    main()
