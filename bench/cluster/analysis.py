"""From runs to figures: medians and spread per configuration, bytes per step, ratios, the goals.

Pure functions of a BenchResults, so the report can be regenerated and tested from JSON alone.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .results import PEER_TF_MWMS, PEER_TF_PS, BenchResults, LowerBound, RunConfig, RunResult

GROUP_KEY = tuple[str, str, int]  # (workload, profile, hosts)


@dataclass(frozen=True)
class Summary:
    """One configuration over its repetitions."""

    config: RunConfig
    runs: int
    ok: int
    median: float | None  # examples/s over the runs that counted
    low: float | None
    high: float | None
    sent_per_step: list[float] | None  # per host (host 1 first): slope of bytes sent against steps
    bound: LowerBound | None

    @property
    def spread(self) -> float | None:
        """(max - min) / median: how far apart the repetitions were."""
        if self.median is None or self.low is None or self.high is None or self.median == 0:
            return None
        return (self.high - self.low) / self.median

    @property
    def bytes_ratio(self) -> float | None:
        """All hosts' bytes sent per step over the lower bound's (None when either is unknown)."""
        if self.sent_per_step is None or self.bound is None or sum(self.bound.sent_per_host) <= 0:
            return None
        return sum(self.sent_per_step) / sum(self.bound.sent_per_host)


@dataclass(frozen=True)
class Goal:
    """One of the issue's goals: what it asks, the measured figure, and whether it was met."""

    name: str
    target: float  # the figure must be >= target (or <= for `at_most`)
    at_most: bool
    measured: float | None
    detail: str

    @property
    def met(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured <= self.target if self.at_most else self.measured >= self.target


def bytes_per_step(runs: list[RunResult]) -> list[float] | None:
    """Per host, the least-squares slope of bytes sent against steps over `runs` (which ran
    different step counts), so start-up traffic (capture, connections, initial values) cancels out.
    None unless at least two step counts were run."""
    ok = [r for r in runs if r.ok and r.bytes]
    if len({r.steps for r in ok}) < 2:
        return None
    steps = np.array([r.steps for r in ok], dtype=float)
    slopes = []
    for h in range(len(ok[0].bytes)):
        sent = np.array([r.bytes[h].sent for r in ok], dtype=float)
        slopes.append(float(np.polyfit(steps, sent, 1)[0]))
    return slopes


def summarize(results: BenchResults) -> list[Summary]:
    """One Summary per configuration, in the order configurations first appear."""
    by_config: dict[RunConfig, list[RunResult]] = defaultdict(list)
    for run in results.runs:
        by_config[run.config].append(run)
    bounds = {(b.workload, b.hosts, b.system, b.profile): b for b in results.lower_bounds}
    summaries = []
    for config, runs in by_config.items():
        rates = [r.examples_per_s for r in runs if r.examples_per_s is not None]
        summaries.append(Summary(
            config=config, runs=len(runs), ok=len(rates),
            median=statistics.median(rates) if rates else None,
            low=min(rates) if rates else None, high=max(rates) if rates else None,
            sent_per_step=bytes_per_step(runs),
            bound=(bounds.get((config.workload, config.hosts, config.planned.label, config.profile))
                   or bounds.get((config.workload, config.hosts, config.planned.label, ""))) if config.kind == "adrun" else None,
        ))
    return summaries


def groups(summaries: list[Summary]) -> dict[GROUP_KEY, list[Summary]]:
    out: dict[GROUP_KEY, list[Summary]] = defaultdict(list)
    for s in summaries:
        out[(s.config.workload, s.config.profile, s.config.hosts)].append(s)
    return dict(out)


def scaling_points(by_group: dict[GROUP_KEY, list[Summary]], workload: str, profile: str) -> dict[int, list[Summary]]:
    """Host count -> configurations of `workload` under `profile`; the 1-host runs, measured under
    one profile only (no traffic leaves the host), count for every profile."""
    points = {h: g for (w, p, h), g in by_group.items() if (w, p) == (workload, profile)}
    for (w, _, h), group in by_group.items():
        if w == workload and h == 1:
            points.setdefault(1, group)
    return dict(sorted(points.items()))


def best(summaries: list[Summary], kind: str | None = None, system: str | None = None) -> Summary | None:
    """The fastest configuration (by median) of `kind` ("adrun"/"peer") or of one `system`."""
    measured = [s for s in summaries if s.median is not None
                and (kind is None or s.config.kind == kind) and (system is None or s.config.system == system)]
    return max(measured, key=lambda s: s.median or 0.0, default=None)


def ratio(a: Summary | None, b: Summary | None) -> float | None:
    if a is None or b is None or not b.median:
        return None
    return (a.median or 0.0) / b.median


def goals(results: BenchResults) -> list[Goal]:
    """The issue's goals, each with its measured figure (None: not measured in this invocation)."""
    by_group = groups(summarize(results))
    out = []

    def speedup(hosts: int, peer: str, target: float) -> None:
        group = by_group.get(("sparse", "commodity", hosts), [])
        a, p = best(group, kind="adrun"), best(group, system=peer)
        detail = f"{a.config.label} {a.median:,.0f} vs {peer} {p.median:,.0f} examples/s" if a and p and a.median and p.median else "not measured"
        out.append(Goal(f"sparse, commodity, {hosts} hosts: adrun's best / {peer}", target, False, ratio(a, p), detail))

    speedup(2, PEER_TF_PS, 1.5)
    speedup(4, PEER_TF_PS, 2.0)
    speedup(4, PEER_TF_MWMS, 5.0)
    for profile in ("commodity", "datacenter"):
        worst: tuple[float, str] | None = None
        for (workload, prof, hosts), group in sorted(by_group.items()):
            if workload != "dense" or prof != profile:
                continue
            a, p = best(group, kind="adrun"), best(group, kind="peer")
            r = ratio(a, p)
            if r is not None and a and p and (worst is None or r < worst[0]):
                worst = (r, f"{hosts} hosts: {a.config.label} {a.median:,.0f} vs {p.config.label} {p.median:,.0f} examples/s")
        out.append(Goal(f"dense, {profile}: adrun's best / best peer (worst host count)", 0.95, False,
                        worst[0] if worst else None, worst[1] if worst else "not measured"))
    worst_bytes: tuple[float, str] | None = None
    for (workload, profile, hosts), group in sorted(by_group.items()):
        a = best(group, kind="adrun")
        if a is not None and a.bytes_ratio is not None and (worst_bytes is None or a.bytes_ratio > worst_bytes[0]):
            worst_bytes = (a.bytes_ratio, f"{workload}, {profile}, {hosts} hosts: {a.config.label} "
                           f"(bound: {a.bound.method if a.bound else '-'})")
    out.append(Goal("bytes per step / lower bound (adrun's fastest configuration, worst group)", 1.15, True,
                    worst_bytes[0] if worst_bytes else None, worst_bytes[1] if worst_bytes else "not measured"))
    hook = results.hook_overhead
    overhead = 1 - hook.ratio if hook is not None and hook.ratio is not None else None
    out.append(Goal("hook overhead, 1 worker no PS (1 - adrun/plain)", 0.03, True, overhead,
                    hook.source if hook is not None else "not measured"))
    return out
