"""bench/RESULTS-cluster.md and its PNG plots, generated from a results JSON (never from terminal output).

    .venv/bin/python -m bench.cluster.report bench/results/cluster.json --markdown bench/RESULTS-cluster.md

Without `--markdown` the report goes beside the JSON, with its stem and `.md` (`default_markdown`,
which bench.cluster.run uses too), so that regenerating one run's report never overwrites another's;
each report's "regenerate with" line names its own `--markdown`.
"""

from __future__ import annotations

import os
import shlex
import statistics
from pathlib import Path

import click

from ..paths import BENCH, REPO
from .analysis import Goal, Summary, best, goals, groups, ratio, scaling_points, summarize
from .results import BenchResults, load_results


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


def _per_host(values: list[float] | None) -> str:
    return "-" if values is None else " / ".join(f"{v / 1024:,.0f}" for v in values)


def _met(goal: Goal) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[goal.met]


def goal_rows(results: BenchResults) -> list[str]:
    return goal_table(goals(results))


def goal_table(measured: list[Goal]) -> list[str]:
    rows = ["| goal | target | measured | result | detail |", "|---|---|---|---|---|"]
    for g in measured:
        target = f"{'≤' if g.at_most else '≥'} {g.target:g}"
        rows.append(f"| {g.name} | {target} | {_num(g.measured, '.3f')} | {_met(g)} | {g.detail} |")
    return rows


def group_table(summaries: list[Summary]) -> list[str]:
    rows = ["| system | runs ok | median examples/s | min – max | spread | KiB sent/step per host | bound KiB/step per host | bytes / bound |",
            "|---|---|---|---|---|---|---|---|"]
    for s in sorted(summaries, key=lambda s: (s.config.kind, -(s.median or 0))):
        rows.append(
            f"| {s.config.label}{' (peer)' if s.config.kind == 'peer' else ''} | {s.ok}/{s.runs} | {_num(s.median)} | "
            f"{_num(s.low)} – {_num(s.high)} | {_num(s.spread, '.0%')} | {_per_host(s.sent_per_step)} | "
            f"{_per_host(s.bound.sent_per_host if s.bound else None)} | {_num(s.bytes_ratio, '.2f')} |")
    return rows


def scaling_rows(summaries: list[Summary]) -> list[str]:
    """Per (workload, profile): adrun's best and each peer's examples/s at every host count measured."""
    by_group = groups(summaries)
    rows = []
    for workload, profile in sorted({(w, p) for w, p, h in by_group if h > 1}):
        points = scaling_points(by_group, workload, profile)
        counts = list(points)
        if len(counts) < 2:
            continue
        rows += [f"**{workload}, {profile}**", "", "| system | " + " | ".join(f"{h} host(s)" for h in counts) + " |",
                 "|---|" + "---|" * len(counts)]
        lines: dict[str, list[str]] = {}
        for h, group in points.items():
            picks = {"adrun (best)": best(group, kind="adrun")}
            picks.update({s.config.system: s for s in group if s.config.kind == "peer"})
            for name, s in picks.items():
                lines.setdefault(name, ["-"] * len(counts))[counts.index(h)] = (
                    f"{_num(s.median)}" + (f" ({s.config.label})" if name == "adrun (best)" and s else "") if s else "-")
        rows += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in lines.items()] + [""]
    return rows


def busy_note(results: BenchResults) -> list[str]:
    """A note when the machine ran more than its CPUs' worth of work (1-minute load average above
    the CPU count, at the start, the end or after any run), with the median over the runs."""
    cpus = float(results.machine.get("cpus", "0") or 0)
    per_run = [r.load_average for r in results.runs if r.load_average is not None]
    loads = results.loads()
    if cpus and any(load > cpus for load in loads):
        median = f", median {statistics.median(per_run):.1f} after the runs" if per_run else ""
        return [f"the machine was busy (load average up to {max(loads):.1f}{median} on {cpus:.0f} CPUs): other "
                "processes shared its cores, so absolute figures are noise; compare rows of this run"]
    return []


def command_path(path: Path) -> str:
    """`path` as a report's regenerate command names it: the command runs from the repository root,
    so relative to it for a file in the repository, else absolute (a report written to /tmp/x/)."""
    absolute = path.resolve()
    return str(absolute.relative_to(REPO)) if absolute.is_relative_to(REPO) else str(absolute)


def regenerate_command(json_path: Path, markdown: Path) -> str:
    """The command that rewrites this module's report: it names `markdown`, without which the
    report would go elsewhere (`default_markdown`)."""
    return shlex.join([".venv/bin/python", "-m", "bench.cluster.report", command_path(json_path),
                       "--markdown", command_path(markdown)])


def header_lines(results: BenchResults, markdown: Path, json_path: Path, regenerate: str) -> list[str]:
    """Where the report (written to `markdown`) comes from and what ran: command, times, machine,
    versions, links, notes. `regenerate`: the command that rewrites the report, which the module
    that wrote it knows (a TF2 report's is bench.cluster.tf2_report's)."""
    m = results.machine
    return [
        f"Generated from `{os.path.relpath(json_path, markdown.parent)}`; regenerate with `{regenerate}`.",
        "",
        *([f"> **Warning**: {results.autogroup_warning}", ""] if results.autogroup_warning else []),
        f"- Command: `{results.command}`",
        f"- Started {results.started}, finished {results.finished or '(interrupted)'}",
        "- Machine: " + ", ".join(f"{k} {v}" for k, v in m.items()),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in results.versions.items()),
        "- Profiles: " + "; ".join(f"{p.name} {p.rate_mbit:g} Mbit/s per host link, both directions, "
                                   f"{p.delay_ms:g} ms added latency" for p in results.profiles),
        "- Hosts: network namespaces on one bridge, each host 1 worker + 1 PS (adrun over SSH, peers by "
        "`ip netns exec`); examples/s = the workers' own timed steps after warm-up, summed; repetitions "
        "interleaved round-robin over configurations; bytes/step = slope of each host's interface counters "
        "against steps over repetitions of different step counts.",
        *(f"- Note: {n}" for n in [*results.notes, *busy_note(results)]),
    ]


def configuration_lines(summaries: list[Summary]) -> list[str]:
    """Every configuration, one table per (workload, profile, hosts) group."""
    lines = ["## Every configuration", ""]
    for (workload, profile, hosts), group in sorted(groups(summaries).items()):
        lines += [f"### {workload}, {profile}, {hosts} host(s)", "", *group_table(group), ""]
    return lines


def failure_lines(results: BenchResults) -> list[str]:
    failed = [r for r in results.runs if not r.ok]
    return [f"- {r.config.label} on {r.config.workload}/{r.config.profile}/{r.config.hosts} hosts, repetition "
            f"{r.repetition}: {(r.error or 'incomplete').splitlines()[0]}" for r in failed] or ["None."]


def plot_lines(plots: list[Path], relative_to: Path) -> list[str]:
    return ["", "## Plots", ""] + [f"![{p.stem}]({os.path.relpath(p, relative_to)})" for p in plots] if plots else []


def render_markdown(results: BenchResults, plots: list[Path], markdown: Path, json_path: Path) -> str:
    """The report to be written to `markdown` (links and paths relative to its folder)."""
    relative_to = markdown.parent
    summaries = summarize(results)
    by_group = groups(summaries)
    lines = [
        "# Benchmark cluster: adrun against hand-written TensorFlow peers on namespace hosts",
        "",
        *header_lines(results, markdown, json_path, regenerate_command(json_path, markdown)),
        "",
        "## Goals",
        "",
        *goal_rows(results),
        "",
        "## adrun's best against the peers",
        "",
        "| workload | profile | hosts | adrun's best | best peer | ratio | vs tf_ps | vs tf_mwms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (workload, profile, hosts), group in sorted(by_group.items()):
        a, p = best(group, kind="adrun"), best(group, kind="peer")
        lines.append(
            f"| {workload} | {profile} | {hosts} | {a.config.label + ' ' + _num(a.median) if a else '-'} | "
            f"{p.config.label + ' ' + _num(p.median) if p else '-'} | {_num(ratio(a, p), '.2f')} | "
            f"{_num(ratio(a, best(group, system='tf_ps')), '.2f')} | {_num(ratio(a, best(group, system='tf_mwms')), '.2f')} |")
    lines += ["", *configuration_lines(summaries)]
    scaling = scaling_rows(summaries)
    lines += ["## Scaling (examples/s)", "", *(scaling or ["Only one host count was measured.", ""])]
    hook = results.hook_overhead
    lines += ["## Hook overhead (single process)", ""]
    if hook is not None and hook.ratio is not None:
        lines.append(f"plain {_num(hook.plain_examples_per_s)} examples/s, under adrun {_num(hook.adrun_examples_per_s)}: "
                     f"ratio {hook.ratio:.3f}; CPU time per step adrun / plain {_num(hook.cpu_ratio, '.3f')} ({hook.source})")
    else:
        lines.append(hook.source if hook else "GAP: not run")
    lines += ["", "## Runs that did not count", "", *failure_lines(results), *plot_lines(plots, relative_to)]
    return "\n".join(lines) + "\n"


def write_plots(results: BenchResults, out_dir: Path, prefix: str) -> list[Path]:
    """Bar charts of examples/s (median, min–max bars) per group, and scaling curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    by_group = groups(summarize(results))
    for (workload, profile, hosts), group in sorted(by_group.items()):
        shown = [s for s in group if s.median is not None]
        if not shown:
            continue
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(shown) + 1.5))
        labels = [s.config.label + (" (peer)" if s.config.kind == "peer" else "") for s in shown]
        medians = [s.median for s in shown]
        errors = [[s.median - s.low for s in shown], [s.high - s.median for s in shown]]
        colors = ["tab:blue" if s.config.kind == "adrun" else "tab:orange" for s in shown]
        ax.barh(labels, medians, xerr=errors, color=colors, capsize=3)
        ax.invert_yaxis()
        ax.set_xlabel("examples/s (median, min–max)")
        ax.set_title(f"{workload}, {profile}, {hosts} host(s)")
        fig.tight_layout()
        path = out_dir / f"{prefix}-{workload}-{profile}-{hosts}h.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    for workload, profile in sorted({(w, p) for w, p, h in by_group if h > 1}):
        points = scaling_points(by_group, workload, profile)
        counts = list(points)
        if len(counts) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        names = ["adrun"] + sorted({s.config.system for g in points.values() for s in g if s.config.kind == "peer"})
        for name in names:
            picked = [(h, best(g, **({"kind": "adrun"} if name == "adrun" else {"system": name}))) for h, g in points.items()]
            measured = [(h, s.median) for h, s in picked if s is not None and s.median is not None]
            ax.plot([h for h, _ in measured], [m for _, m in measured], marker="o",
                    label=name + (" (best builder)" if name == "adrun" else ""))
        ax.set_xlabel("hosts")
        ax.set_ylabel("examples/s (median)")
        ax.set_xticks(counts)
        ax.set_title(f"scaling: {workload}, {profile}")
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"{prefix}-{workload}-{profile}-scaling.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def write_report(json_path: Path, markdown: Path, plots: bool = True) -> None:
    results = load_results(json_path)
    plot_files = write_plots(results, json_path.parent, json_path.stem) if plots else []
    markdown.write_text(render_markdown(results, plot_files, markdown, json_path))


def default_markdown(json_path: Path | None, tf2: bool = False, quick: bool = False) -> Path:
    """The report's path when `--markdown` is not given (here and in bench.cluster.run): beside
    `json_path` with its stem and `.md`, so that a run written elsewhere (a scratch folder, a named
    result) leaves the repository's reports alone; without one (bench.cluster.run without `--out`),
    the repository's report of that kind of run, which the Makefile's targets regenerate:
    RESULTS-cluster-quick.md for `--quick` (a quick run does not replace the full benchmark's
    report), RESULTS-cluster-tf2.md for `--tf2`, else RESULTS-cluster.md."""
    if json_path is not None:
        return json_path.with_suffix(".md")
    name = "RESULTS-cluster-quick.md" if quick else "RESULTS-cluster-tf2.md" if tf2 else "RESULTS-cluster.md"
    return BENCH / name


@click.command()
@click.argument("json_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The report [default: JSON_PATH with .md for its suffix].")
@click.option("--plots/--no-plots", default=True, show_default=True, help="Also draw the PNG plots (needs matplotlib).")
def main(json_path: Path, markdown: Path | None, plots: bool) -> None:
    """Write the markdown report (and plots next to JSON_PATH) from a benchmark's results."""
    markdown = markdown or default_markdown(json_path)
    write_report(json_path, markdown, plots)
    click.echo(f"wrote {markdown}")


if __name__ == "__main__":
    main()
