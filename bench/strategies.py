"""Throughput of adrun's strategies on the bundled examples, on this machine as a local cluster.

Runs `adrun --quiet --result-json` for each (example, strategy, options, workers × in-graph replicas)
and reads the job's result (the JobReport, not the terminal table): cluster steps/s, examples/s and
the all-reduce payload per step. Writes a markdown table (default bench/RESULTS.md). Numbers from a shared 2-core machine are indicative only: compare rows of one
run, not runs of different days.

    .venv/bin/python -m bench.strategies [--steps 300] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a file (`python bench/strategies.py`): `bench` is no package to import from
    sys.exit("run from the repository root as python -m bench.strategies")

from adrun.launch.job.report import JobReport
from bench.paths import BENCH, EXAMPLES_DIR, REPO


@dataclass(frozen=True)
class Case:
    script: str
    strategy: str
    options: tuple[str, ...] = ()
    workers: int = 2
    replicas: int = 1  # in-graph replicas per worker (virtual CPU devices here)

    def spec(self) -> str:
        return (f"version: 1\nnodes:\n  - address: localhost\n    workers: {self.workers}\n    ps: 2\n"
                f"    replicas: {self.replicas}\n")


CASES = [
    Case("linear_regression.py", "PS"),
    Case("linear_regression.py", "PSLoadBalancing"),
    Case("linear_regression.py", "AllReduce"),
    Case("embedding.py", "PS"),
    Case("embedding.py", "PSLoadBalancing"),
    Case("embedding.py", "PartitionedPS"),
    Case("embedding.py", "Parallax"),
    Case("embedding.py", "AllReduce"),
    Case("keras_cnn.py", "PSLoadBalancing"),
    Case("keras_cnn.py", "AllReduce"),
    Case("keras_cnn.py", "AllReduce", ("compressor=fp16",)),
    Case("keras_cnn.py", "AllReduce", ("compressor=powersgd",)),
    # the same two CPU devices as 2 worker processes, or as 2 in-graph replicas of 1 worker
    Case("keras_cnn.py", "AllReduce", workers=1, replicas=2),
    Case("keras_cnn.py", "AllReduce", workers=2, replicas=2),
]


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def run_case(case: Case, spec: Path, steps: int) -> dict[str, str]:
    spec.write_text(case.spec())
    result = spec.parent / "result.json"
    result.unlink(missing_ok=True)
    opts = [a for o in case.options for a in ("--strategy-opt", o)]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "adrun", "--spec", str(spec), "--strategy", case.strategy, *opts, "--quiet",
         "--result-json", str(result), str(EXAMPLES_DIR / case.script), "--steps", str(steps)],
        capture_output=True, text=True, cwd=REPO, timeout=900,
    )
    report = JobReport.model_validate_json(result.read_text()) if result.exists() else None
    payload = max((t.allreduce_bytes_per_step or 0 for t in report.tasks), default=0) if report else 0
    return {
        "example": case.script,
        "strategy": case.strategy + (f" ({', '.join(case.options)})" if case.options else ""),
        "workers × replicas": f"{case.workers} × {case.replicas}",
        "exit": str(proc.returncode),
        "steps/s": _rate(report.steps_per_s) if report else "-",
        "examples/s": _rate(report.examples_per_s) if report else "-",
        "payload B/step": f"{payload:,}" if payload else "-",
        "wall s": f"{time.monotonic() - started:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=BENCH / "RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "cluster.yml"
        rows = []
        for case in CASES:
            rows.append(run_case(case, spec, args.steps))
            print(" | ".join(rows[-1].values()), flush=True)
    header = list(rows[0])
    lines = [
        "# Strategy throughput (bench/strategies.py)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"cluster: this machine, 2 PS and the workers × in-graph replicas shown; {args.steps} steps per run; wall time includes "
        "capture and TF start-up. Indicative only (shared machine).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row.values()) + " |" for row in rows),
        "",
    ]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
