"""What Auto as the default adds to a start (issue 21's goal: a first start at most 10 s more, a repeated
start at most 1 s more), for graph-mode scripts and a TF2 one (examples/keras_embedding.py: Keras 3
`fit`, profiled at its optimizer applies).

For each example, ROUNDS rounds, interleaved so that the machine's load falls on all three alike:

- baseline: `adrun --dry-run --strategy AllReduce SCRIPT` (capture, plan, write the plan; nothing runs);
- first start: `adrun --dry-run SCRIPT` with an empty records database (one process of the script:
  its capture, then, no plan being remembered, its profile; measure the network, fit, Auto's search,
  remember the plan);
- repeated start: the same again with the database the first start left (capture, read the plan, the
  process told to stop at its capture point).

Every start captures the script: the capture is what gives the graph's fingerprint, the key the plan is
remembered by, and a start with any builder does it. So the overhead of a start is its wall time minus
the baseline's of the same round; the medians are reported. Absolute seconds are noise (a shared
2-core machine, TensorFlow's import dominates); the differences are the figure. Writes JSON to
bench/results/auto_start.json and a markdown table to bench/RESULTS-auto-start.md.

    .venv/bin/python -m bench.auto_start [--rounds 3] [--example embedding.py ...]
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
import time
from pathlib import Path
from typing import TYPE_CHECKING

if not __package__:  # run as a file (`python bench/auto_start.py`): `bench` is no package to import from
    sys.exit("run from the repository root as python -m bench.auto_start")

from bench.paths import BENCH, EXAMPLES_DIR, REPO, RESULTS_DIR

if TYPE_CHECKING:
    from adrun.spec import ClusterSpec

EXAMPLES = {"embedding.py": ["--steps", "60"], "linear_regression.py": ["--steps", "60"],
            "keras_embedding.py": ["--steps", "60"]}
FIRST_GOAL_S, REPEAT_GOAL_S = 10.0, 1.0


def start(script: str, args: list[str], records: Path, home: Path, strategy: list[str]) -> float:
    """Wall seconds of one `adrun --dry-run` start."""
    env = {**os.environ, "ADRUN_RECORDS": str(records), "ADRUN_HOME": str(home)}
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "adrun", "--dry-run", *strategy, str(EXAMPLES_DIR / script),
                           *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"adrun {' '.join(strategy)} {script} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    if not strategy and ("profiling" in proc.stderr) == ("the plan made earlier" in proc.stderr):
        raise SystemExit(f"{script}: a default start neither profiled nor reused a plan, or did both:\n{proc.stderr}")
    return wall


def measure(script: str, args: list[str], rounds: int, home: Path) -> dict:
    walls: dict[str, list[float]] = {"baseline": [], "first": [], "repeat": []}
    for r in range(rounds):
        records = home / f"{script}-{r}.sqlite"
        walls["baseline"].append(start(script, args, home / "baseline.sqlite", home, ["--strategy", "AllReduce"]))
        walls["first"].append(start(script, args, records, home, []))
        walls["repeat"].append(start(script, args, records, home, []))
    first = [f - b for f, b in zip(walls["first"], walls["baseline"], strict=True)]
    repeat = [f - b for f, b in zip(walls["repeat"], walls["baseline"], strict=True)]
    return {"script": script, "args": args, "rounds": rounds, "wall_s": walls,
            "first_overhead_s": statistics.median(first), "repeat_overhead_s": statistics.median(repeat),
            "first_overheads_s": first, "repeat_overheads_s": repeat}


def planning_beyond_capture(script: str, args: list[str], rounds: int, home: Path,
                            spec: ClusterSpec | None = None) -> dict:
    """Seconds `plan_script` takes once the script's graph is known, in this process: from the
    capture's return (AllReduce) or the first start's process reporting its graph (Auto) to the plan.
    Each round plans three ways, interleaved: AllReduce, the default with empty records (the same
    process goes on into the profile; network, fit, search), the default again (the remembered plan,
    the process told to stop). Without the TensorFlow start-up in it, this is the figure the ≤ 1 s
    goal is about; the wall-clock differences above cannot resolve it on a loaded machine. `spec`:
    the cluster planned for (default: the local one; bench/auto_start_hosts.py gives namespace hosts)."""
    import adrun.capture_run as capture_run
    import adrun.gathering as gathering
    from adrun.cli.planning import chosen_plan, plan_script
    from adrun.launch.job.provision import RemoteNodes
    from adrun.records.store import open_records
    from adrun.spec import default_local_spec

    spec, path = spec or default_local_spec(), EXAMPLES_DIR / script
    known_at: list[float] = []  # when the graph became known, per plan
    real_graph, real_capture = capture_run.CaptureThenProfile.graph, gathering.capture

    def graph(self: capture_run.CaptureThenProfile) -> object:
        item = real_graph(self)
        known_at.append(time.monotonic())
        return item

    def capture(sources: gathering.FactSources) -> object:
        item = real_capture(sources)
        known_at.append(time.monotonic())
        return item

    capture_run.CaptureThenProfile.graph = graph  # type: ignore[method-assign,assignment]
    gathering.capture = capture  # type: ignore[assignment]
    seconds: dict[str, list[float]] = {"baseline": [], "first": [], "repeat": []}
    try:
        with RemoteNodes(spec) as remote:
            for r in range(rounds):
                with open_records(home / f"inproc-{script}-{r}.sqlite") as records:
                    for kind, strategy in (("baseline", "AllReduce"), ("first", None), ("repeat", None)):
                        job = gathering.FactSources(path, args, spec, f"bench-{kind}-{r}", remote, records)
                        known_at.clear()
                        plan_script(chosen_plan(strategy, {}), job)
                        seconds[kind].append(time.monotonic() - known_at[0])
    finally:
        capture_run.CaptureThenProfile.graph, gathering.capture = real_graph, real_capture  # type: ignore[method-assign]
    return {"seconds": seconds, **{f"{k}_median_s": statistics.median(v) for k, v in seconds.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--example", action="append", choices=sorted(EXAMPLES),
                        help="only this example (repeatable; default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(script, EXAMPLES[script], args.rounds, Path(tmp)) for script in args.example or EXAMPLES]
        for result in results:
            result["planning_beyond_capture"] = planning_beyond_capture(result["script"], result["args"], args.rounds,
                                                                        Path(tmp))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = {"when": when, "host": platform.node(), "cpus": os.cpu_count(), "load_1m": os.getloadavg()[0],
           "goals_s": {"first": FIRST_GOAL_S, "repeat": REPEAT_GOAL_S}, "results": results}
    (RESULTS_DIR / "auto_start.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"# Auto as the default: what it adds to a start ({when})",
        "",
        f"{platform.node()}, {os.cpu_count()} CPUs, shared with other work (1-minute load {out['load_1m']:.1f} at "
        f"the end); the default local cluster (2 workers + 1 PS); `adrun --dry-run`, medians of "
        f"{args.rounds} interleaved rounds. Overhead = the start's wall time minus the same round's "
        "`--strategy AllReduce` start (both capture the script: the capture gives the fingerprint the plan is "
        "remembered by). Absolute seconds are noise on this machine; the differences are the figure. "
        "Produced by `bench/auto_start.py`; JSON in bench/results/auto_start.json.",
        "",
        f"| example | baseline (AllReduce) | first start: overhead (goal <= {FIRST_GOAL_S:.0f} s) "
        f"| repeated start: overhead (goal <= {REPEAT_GOAL_S:.0f} s) |",
        "|---|---:|---:|---:|",
    ]
    for r in results:
        first, repeat = r["first_overhead_s"], r["repeat_overhead_s"]
        lines.append(f"| {r['script']} {' '.join(r['args'])} | {statistics.median(r['wall_s']['baseline']):.1f} s "
                     f"| {first:+.1f} s ({'met' if first <= FIRST_GOAL_S else 'not met'}) "
                     f"| {repeat:+.1f} s ({'met' if repeat <= REPEAT_GOAL_S else 'not met'}) |")
    lines += [
        "",
        "Planning beyond the capture, in one process (`plan_script` from the moment the graph is known, medians):",
        "",
        "| example | AllReduce | first start (profile, network, fit, search) | repeated start (remembered plan) |",
        "|---|---:|---:|---:|",
    ]
    for r in results:
        p = r["planning_beyond_capture"]
        lines.append(f"| {r['script']} | {p['baseline_median_s']:.3f} s | {p['first_median_s']:.1f} s "
                     f"| {p['repeat_median_s']:.3f} s |")
    (BENCH / "RESULTS-auto-start.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
