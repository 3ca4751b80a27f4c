"""The terminal form of `adrun profile`'s report: three tables (model, cluster, strategies) and
the recommendation, meant to be read in a minute. Renders a `ProfileReport` and nothing else,
so the terminal and `--json` cannot disagree.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .profile_report import Candidate, ProfileReport

MAX_VARIABLE_ROWS = 12  # the rest is summed in one row; --json has them all
BAR_WIDTH = 20
_EIGHTHS = " ▏▎▍▌▋▊▉"


def render(report: ProfileReport, console: Console, plan_path: str | None = None) -> None:
    for heading, table in (_model_table(report), _cluster_table(report), _strategies_table(report)):
        console.print(heading, soft_wrap=True)
        console.print(table)
    console.print(Text(_fit_line(report), style="dim"), soft_wrap=True)
    for candidate in report.candidates:
        trial = candidate.trial
        if trial is not None and not trial.succeeded:
            cause = trial.root_cause or "the trial did not report a training step"
            last = f": {trial.root_cause_stderr[-1]}" if trial.root_cause_stderr else ""
            console.print(Text.assemble(("✗ ", "bold red"), (f"{candidate.builder} trial failed: ", "bold"),
                                        cause + last), soft_wrap=True)
    console.print(_recommendation(report, plan_path))


def _heading(name: str, text: str) -> Text:
    return Text.assemble((f"{name}: ", "bold"), text)


def _model_table(report: ProfileReport) -> tuple[Text, Table]:
    model = report.model
    batch = f"batch {model.batch_size}" if model.batch_size else "batch size unknown"
    heading = _heading("model", f"{model.script} · {len(model.variables)} variables, {_mb(model.total_mb)} · "
                                f"{model.optimizer or 'optimizer unknown'} · {batch} · "
                                f"compute {_ms(model.compute_s)}/step (one process, {model.steps_measured} steps)")
    table = Table(caption="step: the gradient one worker's step produces (sparse: the rows it touched)",
                  caption_justify="left")
    table.add_column("variable")
    table.add_column("shape")
    table.add_column("size", justify="right")
    table.add_column("grad")
    table.add_column("rows/step (max)", justify="right")
    table.add_column("step", justify="right")
    table.add_column("share", justify="right")
    shown = model.variables[:MAX_VARIABLE_ROWS]
    for var in shown:
        rows = "-" if var.rows_touched_mean is None else f"{var.rows_touched_mean:,.1f} ({var.rows_touched_max:,})"
        table.add_row(var.name, str(var.shape), _mb(var.mb), var.grad, rows, _mb(var.step_mb), f"{var.step_share:.0%}")
    rest = model.variables[MAX_VARIABLE_ROWS:]
    if rest:
        table.add_row(Text(f"… {len(rest)} more", style="dim"), "", _mb(sum(v.mb for v in rest)), "", "",
                      _mb(sum(v.step_mb for v in rest)), f"{sum(v.step_share for v in rest):.0%}")
    return heading, table


def _cluster_table(report: ProfileReport) -> tuple[Text, Table]:
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
    return heading, table


def _strategies_table(report: ProfileReport) -> tuple[Text, Table]:
    tried = report.trials is not None
    heading = _heading("strategies", "fastest predicted first")
    table = Table()
    table.add_column("builder")
    table.add_column("step", justify="right")
    table.add_column("examples/s", justify="right")
    table.add_column("busiest link: bytes/step")
    table.add_column("bound")
    if tried:
        table.add_column("measured step", justify="right")
        table.add_column("measured ex/s", justify="right")
        table.add_column("error", justify="right")
    table.add_column("predicted examples/s" if not tried else "predicted (█) / measured (▒)")
    best_rate = max(1 / c.prediction.step_s for c in report.candidates)
    if tried:
        best_rate = max([best_rate, *(1 / c.measured_step_s for c in report.candidates if c.measured_step_s)])
    for candidate in report.candidates:
        p = candidate.prediction
        link = "-" if p.busiest_link == "none" else f"{p.busiest_link}: {_mb(p.busiest_link_bytes / 1e6)}"
        row: list[Text | str] = [candidate.builder, _ms(p.step_s), _rate(p.examples_per_s), link, p.bound]
        if tried:
            row += _measured_cells(candidate)
        row.append(_bars(candidate, best_rate, tried))
        recommended = candidate.builder == report.recommended
        table.add_row(*row, style="bold" if recommended else None)
    return heading, table


def _measured_cells(candidate: Candidate) -> list[Text | str]:
    trial = candidate.trial
    if trial is None:
        return ["not tried", "", ""]
    if not trial.succeeded or trial.step_s is None:
        return [Text("failed", style="red"), "", ""]
    error = (candidate.prediction.step_s - trial.step_s) / trial.step_s
    return [_ms(trial.step_s), _rate(trial.examples_per_s), f"{error:+.0%}"]


def _bars(candidate: Candidate, best_rate: float, tried: bool) -> Text:
    bar = Text(_bar(1 / candidate.prediction.step_s / best_rate), style="cyan")
    measured = candidate.measured_step_s
    if tried and measured:
        bar.append("\n")
        bar.append(_bar(1 / measured / best_rate, "▒"), style="green")
    return bar


def _bar(fraction: float, full: str = "█") -> str:
    """A bar of BAR_WIDTH characters at most, in eighths of a character (a full-shade bar)."""
    eighths = round(max(0.0, min(1.0, fraction)) * BAR_WIDTH * 8)
    if full != "█":
        return full * max(1, round(eighths / 8))
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


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
    text = Text.assemble(("recommended: ", "bold"), (report.recommended, "bold green"))
    trials = report.trials
    if report.recommended_by == "trials" and trials is not None:
        text.append(f" (fastest of {trials.succeeded} trial(s) of {trials.steps} steps")
        if trials.kendall_tau is not None:
            text.append(f"; rank agreement Kendall τ {trials.kendall_tau:+.2f}")
        if trials.mean_relative_error is not None:
            text.append(f", mean relative error {trials.mean_relative_error:.0%}")
        text.append(")")
    else:
        text.append(" (fastest predicted" + ("; no trial succeeded)" if trials else ")"))
    if plan_path:
        text.append(f"\nwrote {plan_path}: run it with adrun --strategy {plan_path} ...")
    else:
        text.append("\nwrite its strategy document with -o plan.yml; measure the candidates with --trials")
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
