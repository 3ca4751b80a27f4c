"""How long a schedule of runs will take, from the wall times of earlier runs (bench/results/*.json).

A run's wall time is mostly start-up (SSH, TensorFlow's import, capture) plus its steps, so the
best guess is an earlier run of the same configuration and length; failing that, the closest
earlier run that shares less (another profile, another length, another system, another workload),
down to a fixed guess. The estimate says how many runs had an exact match, so a first run of a new
matrix is read as the rough figure it is.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .results import BenchResults, RunConfig, RunResult, load_results

UNKNOWN_RUN_S = 60.0  # a run nothing earlier resembles: about a 2-host sparse run on this machine
UNKNOWN_HOOK_OVERHEAD_S = 300.0  # bench/hook_overhead.py's 10 runs, when no earlier result timed it

Key = Callable[[RunConfig, int], tuple]
# most specific first: what an earlier run must share with a planned one to lend its wall time
KEYS: tuple[Key, ...] = (
    lambda c, steps: (c.workload, c.profile, c.hosts, c.label, steps),
    lambda c, steps: (c.workload, c.hosts, c.label, steps),
    lambda c, steps: (c.workload, c.hosts, c.label),
    lambda c, steps: (c.workload, c.hosts),
    lambda c, steps: (c.hosts,),
)


@dataclass(frozen=True)
class Estimate:
    seconds: float
    runs: int
    exact: int  # runs whose configuration and length ran before


def load_history(paths: Iterable[Path]) -> list[BenchResults]:
    """The earlier results files that still parse (an older format is skipped, not an error)."""
    history = []
    for path in sorted(paths):
        try:
            history.append(load_results(path))
        except (ValidationError, ValueError, OSError):
            continue
    return history


def estimate(order: Iterable[tuple[RunConfig, int]], history: list[BenchResults], hook_overhead: bool) -> Estimate:
    """The summed median wall time of each planned (configuration, steps), by the most specific
    earlier runs that match (KEYS), plus bench/hook_overhead.py's last wall time when it is run."""
    past: list[RunResult] = [r for results in history for r in results.runs if r.wall_s > 0]
    tables = []
    for key in KEYS:
        table: dict[tuple, list[float]] = {}
        for r in past:
            table.setdefault(key(r.config, r.steps), []).append(r.wall_s)
        tables.append(table)
    seconds, runs, exact = 0.0, 0, 0
    for config, steps in order:
        runs += 1
        for level, (key, table) in enumerate(zip(KEYS, tables, strict=True)):
            walls = table.get(key(config, steps))
            if walls:
                seconds += statistics.median(walls)
                exact += level == 0
                break
        else:
            seconds += UNKNOWN_RUN_S
    if hook_overhead:
        timed = [r.hook_overhead.wall_s for r in history if r.hook_overhead and r.hook_overhead.wall_s]
        seconds += timed[-1] if timed else UNKNOWN_HOOK_OVERHEAD_S
    return Estimate(seconds=seconds, runs=runs, exact=exact)
