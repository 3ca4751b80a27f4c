"""How long `adrun profile` takes on the bundled examples (issue 10's goal: under 60 s without
trials; with trials about (strategies tried) × (trial length) plus start-up).

Runs `adrun profile --no-record --json` for each example on this machine as the default local
cluster (2 workers + 1 PS), and with `--trials K` a second time with `--trials K --trial-steps N`,
and writes markdown tables: wall time, the machine's load average when it started, the part spent
in trials (their jobs' own wall times, from the report), how many strategies were compared and the
recommendation.

    .venv/bin/python -m bench.profile_time [--trials K --trial-steps N] [--out bench/RESULTS-profile.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as a file (`python bench/profile_time.py`): `bench` is no package to import from
    sys.exit("run from the repository root as python -m bench.profile_time")

from adrun.profile.report import ProfileReport
from bench.paths import BENCH, EXAMPLES_DIR, REPO

EXAMPLES = ["embedding.py", "linear_regression.py", "keras_cnn.py"]
GOAL_S = 60.0


def profile_once(example: str, trial_args: list[str]) -> tuple[float, float, ProfileReport]:
    """Wall time, 1-minute load average at the start, and the report of one `adrun profile`."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "adrun", "profile", "--no-record", "--json", *trial_args,
                           str(EXAMPLES_DIR / example)], capture_output=True, text=True, cwd=REPO, timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"adrun profile {example} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, load, ProfileReport.model_validate_json(proc.stdout)


def row(example: str, wall: float, load: float, report: ProfileReport) -> str:
    trials = [c.trial for c in report.candidates if c.trial is not None]
    in_trials = sum(t.elapsed_s or 0.0 for t in trials)
    trial_cell = f"{len(trials)}: {in_trials:.1f} s" if trials else "-"
    verdict = "yes" if wall - in_trials < GOAL_S else "no"
    return (f"| {example} | {wall:.1f} s | {load:.1f} | {trial_cell} | {wall - in_trials:.1f} s ({verdict}) "
            f"| {len(report.candidates)} | {report.recommended} ({report.recommended_by}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, help="also run the K best-predicted plans")
    parser.add_argument("--trial-steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=BENCH / "RESULTS-profile.md")
    args = parser.parse_args()
    passes = [[]] + ([["--trials", str(args.trials), "--trial-steps", str(args.trial_steps)]] if args.trials else [])
    lines = [
        f"# `adrun profile` on the bundled examples ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"{platform.node()}, {os.cpu_count()} CPUs; the default local cluster (2 workers + 1 PS). The goal: "
        f"the profile without its trials in under {GOAL_S:.0f} s. Load is the 1-minute load average when the "
        "run started (a busy shared machine slows TensorFlow's start-up most). Produced by "
        "`bench/profile_time.py`.",
    ]
    for trial_args in passes:
        lines += [
            "",
            f"`adrun profile --no-record --json {' '.join(trial_args)}`".replace(" `", "`"),
            "",
            "| example | wall | load | trials: their jobs | without trials (< 60 s) | strategies | recommended |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for example in EXAMPLES:
            wall, load, report = profile_once(example, trial_args)
            lines.append(row(example, wall, load, report))
            print(lines[-1], flush=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
