"""The TF2 benchmark's figures: adrun's TF2 mode against the TF2 peers and against its graph mode.

Pure functions of a BenchResults (bench/cluster/analysis.py summarizes the runs), so the TF2 report
can be regenerated, and tested, from JSON alone. "adrun's best" in a group is its fastest TF2-mode
configuration (every plan it ran: the all-reduce family, PS-only plans, Auto); "the best TF2 peer" is the
fastest peer of bench/cluster/tf2.py that completed its runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .analysis import GROUP_KEY, Goal, Summary, best, groups, ratio, summarize
from .results import EXCEPTION_LINE, BenchResults
from .tf2 import GRAPH_TWINS, TF2_PEERS, TF2_WORKLOADS

SAME_PLAN = "AllReduce"  # the plan both modes run for the mode comparison (the graph twin runs only it)
AUTO = "Auto"
LOSSY = (("allow_lossy", "true"),)  # Auto's option that lets it choose the lossy compressors


def _lossy(s: Summary) -> bool:
    """A built-in configuration that compresses its gradients (an option `compressor` other than none)."""
    return any(k == "compressor" and v != "none" for k, v in s.config.options)


@dataclass(frozen=True)
class PeerRow:
    """One TF2 group: adrun's best TF2-mode configuration against the best TF2 peer."""

    group: GROUP_KEY
    adrun: Summary | None
    peer: Summary | None
    by_peer: dict[str, float | None]  # adrun's best / each TF2 peer measured in the group

    @property
    def ratio(self) -> float | None:
        return ratio(self.adrun, self.peer)


@dataclass(frozen=True)
class ModeRow:
    """The same model and plan in TF2 mode (`<model>_keras`) and in graph mode (its twin script)."""

    group: GROUP_KEY  # the TF2 workload's
    tf2: Summary | None
    graph: Summary | None

    @property
    def ratio(self) -> float | None:
        return ratio(self.tf2, self.graph)


def _peer(s: Summary) -> bool:
    return s.config.kind == "peer" and s.config.system in TF2_PEERS


def peer_rows(results: BenchResults) -> list[PeerRow]:
    """Per TF2 group (sorted), adrun's best and the best TF2 peer, and adrun's ratio to each peer."""
    rows = []
    for key, group in sorted(groups(summarize(results)).items()):
        if key[0] not in TF2_WORKLOADS:
            continue
        adrun = best(group, kind="adrun")
        peers = [s for s in group if _peer(s)]
        rows.append(PeerRow(group=key, adrun=adrun, peer=best(peers),
                            by_peer={s.config.system: ratio(adrun, s) for s in peers}))
    return rows


def mode_rows(results: BenchResults) -> list[ModeRow]:
    """Per TF2 group with a graph twin measured under the same plan: the two modes' summaries."""
    by_group = groups(summarize(results))
    rows = []
    for (workload, profile, hosts), group in sorted(by_group.items()):
        twin = GRAPH_TWINS.get(workload)
        graph = by_group.get((twin, profile, hosts), []) if twin else []
        if graph:
            rows.append(ModeRow(group=(workload, profile, hosts), tf2=_same_plan(group), graph=_same_plan(graph)))
    return rows


def _same_plan(group: list[Summary]) -> Summary | None:
    """The group's SAME_PLAN row with the builder's default options (not a variant of it)."""
    return next((s for s in group if s.config.kind == "adrun" and s.config.system == SAME_PLAN and not s.config.options), None)


def _label(s: Summary | None) -> str:
    return f"{s.config.label} {s.median:,.0f}" if s is not None and s.median is not None else "-"


def tf2_goals(results: BenchResults) -> list[Goal]:
    """Issue 20's goals for the TF2 benchmark, each with its measured figure (None: not measured)."""
    peers = {row.group: row for row in peer_rows(results)}
    out = []
    for hosts, target in ((2, 1.5), (4, 2.0)):
        row = peers.get(("sparse_keras", "commodity", hosts))
        out.append(Goal(f"sparse_keras, commodity, {hosts} hosts: adrun's best / best TF2 peer", target, False,
                        row.ratio if row else None,
                        f"{_label(row.adrun)} vs {_label(row.peer)} examples/s" if row else "not measured"))
    for profile in ("commodity", "datacenter"):
        rows = [r for r in peers.values() if r.group[:2] == ("dense_keras", profile) and r.ratio is not None]
        worst = min(rows, key=lambda r: r.ratio or 0.0, default=None)
        out.append(Goal(f"dense_keras, {profile}: adrun's best / best TF2 peer (worst host count)", 1.0, False,
                        worst.ratio if worst else None,
                        f"{worst.group[2]} hosts: {_label(worst.adrun)} vs {_label(worst.peer)}" if worst else "not measured"))
    bytes_rows = [(r.adrun.bytes_ratio, r) for r in peers.values() if r.adrun is not None and r.adrun.bytes_ratio is not None]
    worst_bytes = max(bytes_rows, key=lambda x: x[0], default=None)
    out.append(Goal("bytes per step / lower bound of the plan's family (adrun's fastest TF2 configuration, worst group)",
                    1.15, True, worst_bytes[0] if worst_bytes else None,
                    f"{', '.join(map(str, worst_bytes[1].group))}: {worst_bytes[1].adrun.config.label}"
                    if worst_bytes and worst_bytes[1].adrun else "not measured"))
    modes = [m for m in mode_rows(results) if m.ratio is not None]
    worst_mode = min(modes, key=lambda m: m.ratio or 0.0, default=None)
    out.append(Goal(f"TF2 mode / graph mode, same model and plan ({SAME_PLAN}; worst group)", 0.95, False,
                    worst_mode.ratio if worst_mode else None,
                    f"{', '.join(map(str, worst_mode.group))}: {_label(worst_mode.tf2)} vs graph {_label(worst_mode.graph)}"
                    if worst_mode else "not measured"))
    out += [_auto_goal(results, lossy=False), _auto_goal(results, lossy=True)]
    return out


def _auto_goal(results: BenchResults, lossy: bool) -> Goal:
    """Auto against adrun's best built-in plan, worst TF2 group. Default Auto chooses among lossless
    plans only, so it is held against the best lossless built-in; Auto with allow_lossy=true against
    every built-in, compressed ones included."""
    autos = []
    for key, group in sorted(groups(summarize(results)).items()):
        if key[0] not in TF2_WORKLOADS:
            continue
        auto = best([s for s in group if s.config.kind == "adrun" and s.config.system == AUTO
                     and s.config.options == (LOSSY if lossy else ())])
        builtin = best([s for s in group if s.config.kind == "adrun" and s.config.system != AUTO and (lossy or not _lossy(s))])
        r = ratio(auto, builtin)
        autos += [(r, key, auto, builtin)] if r is not None else []
    worst = min(autos, key=lambda a: a[0], default=None)
    name = ("Auto (allow_lossy=true) / adrun's best built-in plan" if lossy
            else "Auto (default: lossless) / adrun's best lossless built-in plan")
    return Goal(f"{name} (worst TF2 group)", 0.95, False, worst[0] if worst else None,
                f"{', '.join(map(str, worst[1]))}: {_label(worst[2])} vs {_label(worst[3])}" if worst
                else f"not measured: no run of {'Auto with allow_lossy=true' if lossy else 'default Auto'} on a TF2 workload beside a built-in plan")


def failure_reason(error: str | None) -> str | None:
    """The first Python exception (`SomeError: text`, to the end of its line) in a run's error text, or None."""
    found = (EXCEPTION_LINE.search(line) for line in (error or "").splitlines())
    return next((m.string[m.start():].strip() for m in found if m), None)
