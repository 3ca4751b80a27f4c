"""bench/RESULTS-cluster-tf2.md and its plots, from one or more `bench.cluster.run --tf2` results JSONs.

The TF2 matrix runs in several invocations (each short enough to hold the benchmark lock), each
with its own JSON; this merges them and writes the TF2 goals, adrun against the TF2 peers, TF2 mode
against graph mode, how Keras 3 fit fails under MultiWorkerMirroredStrategy, and every configuration:

    .venv/bin/python -m bench.cluster.tf2_report bench/results/cluster-tf2-*.json \\
        --merged bench/results/cluster-tf2bench.json --markdown bench/RESULTS-cluster-tf2.md
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from ..paths import BENCH
from .analysis import summarize
from .report import (_num, command_path, configuration_lines, failure_lines, goal_table, header_lines, plot_lines,
                     write_plots)
from .results import BenchResults, load_results, save_results
from .tf2 import PEER_KERAS3_FIT, PEER_TF2_LOOP, PEER_TF_KERAS_FIT
from .tf2_analysis import failure_reason, mode_rows, peer_rows, tf2_goals



def merge_results(parts: list[BenchResults]) -> BenchResults:
    """One BenchResults of several invocations: their runs and lower bounds in order, the first's
    machine and versions, the earliest start and latest finish (None if any was interrupted), the
    commands joined, the notes without repeats, the last hook overhead measured. Each invocation
    interleaved its own repetitions. A configuration a later invocation measured again keeps only
    the later runs: the code or the machine changed in between, and the runs of one configuration
    come from one invocation. A later invocation's autogroup warning, which the first's machine facts
    do not raise, becomes a note naming its command."""
    if not parts:
        raise ValueError("no results to merge")
    finished = [p.finished for p in parts]
    last = {r.config: i for i, p in enumerate(parts) for r in p.runs}  # each configuration's latest invocation
    overheads = [p.hook_overhead for p in parts if p.hook_overhead is not None]
    warnings = [f"`{p.command}`: {p.autogroup_warning}" for p in parts[1:] if p.autogroup_warning]
    return BenchResults(
        started=min(p.started for p in parts), finished=None if None in finished else max(f for f in finished if f),
        command="` and `".join(p.command for p in parts), machine=parts[0].machine, versions=parts[0].versions,
        profiles=list({p.name: p for part in parts for p in part.profiles}.values()),
        notes=list(dict.fromkeys([*(n for p in parts for n in p.notes), *warnings])),
        runs=[r for i, p in enumerate(parts) for r in p.runs if last[r.config] == i], lower_bounds=[b for p in parts for b in p.lower_bounds],
        hook_overhead=overheads[-1] if overheads else None,
    )


def peer_table(results: BenchResults) -> list[str]:
    rows = ["| workload | profile | hosts | adrun's best (TF2 mode) | best TF2 peer | ratio | vs tf2_mwms_loop | vs tf_keras_mwms_fit |",
            "|---|---|---|---|---|---|---|---|"]
    for row in peer_rows(results):
        w, p, h = row.group
        rows.append(f"| {w} | {p} | {h} | {_pick(row.adrun)} | {_pick(row.peer)} | {_num(row.ratio, '.2f')} | "
                    f"{_num(row.by_peer.get(PEER_TF2_LOOP), '.2f')} | {_num(row.by_peer.get(PEER_TF_KERAS_FIT), '.2f')} |")
    return rows


def mode_table(results: BenchResults) -> list[str]:
    rows = ["| workload | profile | hosts | TF2 mode examples/s | graph mode examples/s | TF2 / graph | "
            "KiB sent/step per host, TF2 | graph |", "|---|---|---|---|---|---|---|---|"]
    for row in mode_rows(results):
        w, p, h = row.group
        rows.append(f"| {w} | {p} | {h} | {_num(row.tf2.median if row.tf2 else None)} | "
                    f"{_num(row.graph.median if row.graph else None)} | {_num(row.ratio, '.3f')} | "
                    f"{_kib(row.tf2)} | {_kib(row.graph)} |")
    return rows


def keras3_fit_lines(results: BenchResults) -> list[str]:
    """What the Keras 3 fit peer's runs ended with: the exception of each distinct failure, counted."""
    runs = [r for r in results.runs if r.config.system == PEER_KERAS3_FIT]
    if not runs:
        return ["Not run in these results."]
    reasons: dict[str, int] = {}
    for r in runs:
        reason = "completed" if r.ok else failure_reason(r.error) or (r.error or "failed").splitlines()[0]
        reasons[reason] = reasons.get(reason, 0) + 1
    return [f"- {count} of {len(runs)} runs: `{reason}`" for reason, count in reasons.items()]


def _pick(s) -> str:
    return f"{s.config.label} {_num(s.median)}" if s is not None and s.median is not None else "-"


def _kib(s) -> str:
    if s is None or s.sent_per_step is None:
        return "-"
    return " / ".join(f"{v / 1024:,.0f}" for v in s.sent_per_step)


def regenerate_command(merged: Path, markdown: Path, preface: Path | None = None) -> str:
    """The command that rewrites a TF2 report: this module on its merged results (one invocation's
    JSON, as bench.cluster.run --tf2 writes it, is its own merge), naming the report and its preface."""
    source = command_path(merged)
    return shlex.join([".venv/bin/python", "-m", "bench.cluster.tf2_report", source, "--merged", source,
                       "--markdown", command_path(markdown),
                       *(["--preface", command_path(preface)] if preface else [])])


def render(results: BenchResults, plots: list[Path], markdown: Path, json_path: Path, preface: str = "",
           regenerate: str | None = None) -> str:
    """The TF2 report to be written to `markdown`; `preface` (the reading of the figures) after the
    title, `regenerate` the command that rewrites it (default: this module's on `json_path`)."""
    relative_to = markdown.parent
    lines = ["# TF2 benchmark: adrun's TF2 mode against what a TF2 user writes without it", "",
             *([preface.rstrip(), ""] if preface else []),
             *header_lines(results, markdown, json_path, regenerate or regenerate_command(json_path, markdown)), "",
             "## Goals", "", *goal_table(tf2_goals(results)), "",
             "## adrun's best against the TF2 peers", "", *peer_table(results), "",
             "## TF2 mode against graph mode (same model, same plan)", "", *mode_table(results), "",
             "## Keras 3 fit under MultiWorkerMirroredStrategy", "", *keras3_fit_lines(results), "",
             *configuration_lines(summarize(results)),
             "## Runs that did not count", "", *failure_lines(results), *plot_lines(plots, relative_to)]
    return "\n".join(lines) + "\n"


def write_tf2_report(json_path: Path, markdown: Path) -> None:
    """The TF2 report and plots of one invocation's results (bench.cluster.run --tf2)."""
    results = load_results(json_path)
    plots = write_plots(results, json_path.parent, json_path.stem)
    markdown.write_text(render(results, plots, markdown, json_path))


@click.command()
@click.argument("json_paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--merged", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Write the merged results here (the plots go next to it).")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=BENCH / "RESULTS-cluster-tf2.md",
              show_default=True)
@click.option("--preface", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Markdown put after the title: the reading of the figures, kept apart from the generated tables.")
def main(json_paths: tuple[Path, ...], merged: Path, markdown: Path, preface: Path | None) -> None:
    """Merge JSON_PATHS, then write the TF2 report and plots."""
    results = merge_results([load_results(p) for p in json_paths])
    save_results(results, merged)
    plots = write_plots(results, merged.parent, merged.stem)
    markdown.write_text(render(results, plots, markdown, merged, preface.read_text() if preface else "",
                               regenerate_command(merged, markdown, preface)))
    click.echo(f"wrote {merged} and {markdown}")


if __name__ == "__main__":
    main()
