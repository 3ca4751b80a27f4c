"""The terminal form of `adrun profile`'s report: tables of the model, the cluster, the strategies
(and the trials), then the recommendation, meant to be read in a minute. Renders a `ProfileReport`
and nothing else, so the terminal and `--json` cannot disagree. At 80 columns the tables
still fit: the `bound` column and long builder names wrap.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .report import Candidate, ProfileReport, ScalingSection, TrialsSection

MAX_VARIABLE_ROWS = 12  # the rest is summed in one row; --json has them all
BAR_WIDTH = 10
_EIGHTHS = " ▏▎▍▌▋▊▉"


def render(report: ProfileReport, console: Console, plan_path: str | None = None) -> None:
    tables = [_model_table(report), _cluster_table(report), _strategies_table(report)]
    if report.trials is not None:
        tables.append(_trials_table(report, report.trials))
    if report.scaling is not None:
        tables.append(_scaling_table(report.scaling))
    for heading, table, note in tables:
        console.print(heading, soft_wrap=True)
        console.print(table)
        if note:
            console.print(Text(note, style="dim"), soft_wrap=True)
    for candidate in report.candidates:
        trial = candidate.trial
        if trial is not None and not trial.succeeded:
            cause = trial.root_cause or "the trial did not report a training step"
            last = f": {trial.root_cause_stderr[-1]}" if trial.root_cause_stderr else ""
            console.print(Text.assemble(("✗ ", "bold red"), (f"{candidate.builder} trial failed: ", "bold"),
                                        cause + last), soft_wrap=True)
    console.print(_recommendation(report, plan_path), soft_wrap=True)


def _heading(name: str, text: str) -> Text:
    return Text.assemble((f"{name}: ", "bold"), text)


def _model_table(report: ProfileReport) -> tuple[Text, Table, str]:
    model = report.model
    batch = f"batch {model.batch_size}" if model.batch_size else "batch size unknown"
    kind = " (TF2 script)" if model.kind == "tf2" else ""
    heading = _heading("model", f"{model.script}{kind} · {len(model.variables)} variables, {_mb(model.total_mb)} · "
                                f"{model.optimizer or 'optimizer unknown'} · {batch} · "
                                f"compute {_ms(model.compute_s)}/step (one process, {model.steps_measured} steps)")
    table = Table()
    table.add_column("variable", overflow="fold")
    table.add_column("shape")
    table.add_column("size", justify="right")
    table.add_column("grad")
    table.add_column("rows/step (max)", justify="right")
    table.add_column("step", justify="right")
    table.add_column("share", justify="right")
    shown = model.variables[:MAX_VARIABLE_ROWS]
    for var in shown:
        rows = "-" if var.rows_touched_mean is None else f"{var.rows_touched_mean:,.1f} ({var.rows_touched_max:,})"
        grad = var.grad if var.pooled_mb is None else f"{var.grad}, pooled ({_mb(var.pooled_mb)} sums)"
        table.add_row(var.name, str(var.shape), _mb(var.mb), grad, rows, _mb(var.step_mb), f"{var.step_share:.0%}")
    rest = model.variables[MAX_VARIABLE_ROWS:]
    if rest:
        table.add_row(Text(f"… {len(rest)} more", style="dim"), "", _mb(sum(v.mb for v in rest)), "", "",
                      _mb(sum(v.step_mb for v in rest)), f"{sum(v.step_share for v in rest):.0%}")
    note = "step: the gradient one worker's step produces (sparse: the rows it touched)"
    if any(v.pooled_mb is not None for v in shown):
        note += ("; pooled: on PS tasks its lookups move per-example sums over their bags, not rows (each shard "
                 "returns them, each PS task takes d_sum of that size)")
    return heading, table, note


def _cluster_table(report: ProfileReport) -> tuple[Text, Table, str]:
    cluster = report.cluster
    nodes = ", ".join(f"{n.address}{' (chief)' if n.chief and len(cluster.nodes) > 1 else ''}: "
                      f"{n.workers} workers, {n.ps} PS" for n in cluster.nodes)
    heading = _heading("cluster", f"{cluster.num_workers} workers, {cluster.num_ps} PS on {len(cluster.nodes)} "
                                  f"node(s) · {nodes}")
    table = Table()
    table.add_column("path")
    table.add_column("bandwidth", justify="right")
    table.add_column("latency", justify="right")
    table.add_column("from")
    for link in cluster.links:
        path = f"{link.src} (inside)" if link.src == link.dst else f"{link.src} → {link.dst}"
        table.add_row(path, f"{link.mbit_s:,.0f} Mbit/s", f"{link.latency_ms:.3f} ms", link.source)
    return heading, table, ""


def _strategies_table(report: ProfileReport) -> tuple[Text, Table, str]:
    heading = _heading("strategies", "fastest predicted first")
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("builder", overflow="fold")
    table.add_column("step", justify="right")
    table.add_column("examples/s", justify="right")
    table.add_column("", no_wrap=True, min_width=BAR_WIDTH)
    table.add_column("busiest\nlink", justify="right")
    table.add_column("bound", ratio=1, min_width=16)
    fastest = min(c.prediction.step_s for c in report.candidates)
    for candidate in report.candidates:
        p = candidate.prediction
        link = "-" if p.busiest_link == "none" else f"{_mb(p.busiest_link_bytes / 1e6)}"
        table.add_row(_builder_text(candidate), _ms(p.step_s), _rate(p.examples_per_s),
                      Text(_bar(fastest / p.step_s), style="cyan"), link, p.bound, style=_row_style(report, candidate))
    unavailable = [f"not on this cluster: {builder}: {why}" for builder, why in report.unavailable.items()]
    return heading, table, "\n".join([_fit_line(report), *unavailable])


def _trials_table(report: ProfileReport, trials: TrialsSection) -> tuple[Text, Table, str]:
    """Measured beside predicted, for the candidates that were tried (fastest predicted first)."""
    heading = _heading("trials", f"{trials.tried} strategies, {trials.steps} steps per worker each")
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("builder", no_wrap=True)
    table.add_column("predicted", justify="right", no_wrap=True)
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("error", justify="right")
    table.add_column("examples/s", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, min_width=BAR_WIDTH)
    tried_builders = {c.builder for c in report.candidates if c.trial is not None}
    shown = [c for c in report.candidates if c.builder in tried_builders or c.same_plan_as in tried_builders]
    fastest = min((c.measured_step_s for c in shown if c.measured_step_s), default=None)
    for candidate in shown:
        predicted, measured = candidate.prediction.step_s, candidate.measured_step_s
        if candidate.same_plan_as is not None:
            cells: list[Text | str] = [Text(f"as {candidate.same_plan_as}", style="dim"), "", "", ""]
        elif measured is None or fastest is None or candidate.trial is None:
            cells = [Text("failed", style="red"), "", "", ""]
        else:
            cells = [_ms(measured), f"{(predicted - measured) / measured:+.0%}", _rate(candidate.trial.examples_per_s),
                     Text(_bar(fastest / measured), style="green")]
        table.add_row(candidate.builder, _ms(predicted), *cells, style=_row_style(report, candidate))
    return heading, table, _agreement_line(trials)


def _scaling_table(scaling: ScalingSection) -> tuple[Text, Table, str]:
    """Predicted examples/s per builder (rows) and host count (columns), Auto last."""
    heading = _heading("scaling", f"predicted examples/s on more hosts of this kind, every path between hosts "
                                  f"{scaling.link_mbit_s:,.0f} Mbit/s, {scaling.link_latency_ms:.2f} ms "
                                  f"({scaling.link_source})")
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("builder", no_wrap=True)
    for hosts in scaling.host_counts:
        table.add_column(f"{hosts} host{'s' if hosts > 1 else ''}", justify="right", no_wrap=True)
    for curve in scaling.curves:
        rate = {p.hosts: p.examples_per_s for p in curve.points}
        table.add_row(curve.builder, *(_rate(rate[h]) if h in rate else "-" for h in scaling.host_counts),
                      style="bold" if curve.builder == "Auto" else None)
    same = ", ".join(f"{hosts}: {builder}" for hosts, builder in scaling.auto_builders.items())
    efficiency = {p.hosts: p.efficiency for c in scaling.curves if c.builder == "Auto" for p in c.points}
    notes = []
    if same:
        notes.append(f"Auto's plan is a built-in one at {same} host(s)")
    if any(e is not None for e in efficiency.values()):
        notes.append("Auto's scaling efficiency (of linear compute-bound scaling): "
                     + ", ".join(f"{h}: {e:.0%}" for h, e in efficiency.items() if e is not None))
    notes.append("published: " + "; ".join(scaling.anchors))
    return heading, table, "\n".join(notes)


def _builder_text(candidate: Candidate) -> Text:
    text = Text(candidate.builder)
    if candidate.same_plan_as is not None:
        text.append(f" = {candidate.same_plan_as}", style="dim")
    return text


def _row_style(report: ProfileReport, candidate: Candidate) -> str | None:
    return "bold" if candidate.builder == report.recommended else None


def _bar(fraction: float) -> str:
    """A bar of BAR_WIDTH characters at most, in eighths of a character."""
    eighths = round(max(0.0, min(1.0, fraction)) * BAR_WIDTH * 8)
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def _agreement_line(trials: TrialsSection) -> str:
    if trials.succeeded == 0:
        return "no trial measured a rate: predictions unchecked"
    parts = [f"{trials.succeeded} of {trials.tried} measured"]
    if trials.kendall_tau is not None:
        parts.append(f"rank agreement (Kendall τ) {trials.kendall_tau:+.2f}")
    if trials.mean_relative_error is not None:
        parts.append(f"mean relative error of the predicted step {trials.mean_relative_error:.0%}")
    return "; ".join(parts)


def _fit_line(report: ProfileReport) -> str:
    fit = report.fit
    skipped = f"; {fit.records_skipped} recorded run(s) without a profile cannot be used" if fit.records_skipped else ""
    if fit.records_used == 0:
        return f"cost model: analytical coefficients (no usable records of this cluster yet{skipped})"
    line = f"cost model fitted on {fit.records_used} record(s) of this cluster"
    if fit.error_after is not None:
        line += f": mean relative error of the step time {fit.error_after:.0%}"
        if fit.error_before is not None:
            line += f" (analytical: {fit.error_before:.0%})"
    return line + skipped


def _recommendation(report: ProfileReport, plan_path: str | None) -> Text:
    how = "fastest measured" if report.recommended_by == "trials" else "fastest predicted"
    if report.trials is not None and report.recommended_by == "prediction":
        how += ", no trial measured a rate"
    text = Text.assemble(("recommended: ", "bold"), (report.recommended, "bold green"), f" ({how})")
    if plan_path:
        text.append(f"\nwrote {plan_path}: run it with adrun --strategy {plan_path} ...")
    else:
        text.append("\nwrite its strategy document with -o plan.yml")
        if report.trials is None:
            text.append("; measure the best with --trials K")
    return text


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def _mb(mb: float) -> str:
    if mb >= 1:
        return f"{mb:,.1f} MB"
    return f"{mb * 1e3:,.1f} kB"


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"
