"""`adrun profile`: profile a script, predict every strategy on the cluster, try the best, recommend one."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Literal

import click

from adrun.cli.app import main
from adrun.cli.options import (
    allow_exposed_option,
    OptionalValue,
    OptionsUpToScript,
    check_fixed_ports,
    existing_script,
    load_cluster,
    new_job_id,
    opened_records,
    parse_strategy_options,
    records_options,
    spec_option,
    user_errors,
)
from adrun.errors import UserError


class _TrialCount(click.ParamType):
    """`--trials K`: a whole number >= 1, or `all`."""

    name = "K"

    def convert(self, value: int | str, param: click.Parameter | None,
                ctx: click.Context | None) -> int | Literal["all"]:
        if value == "all":
            return "all"
        if isinstance(value, int):
            return value
        if not (value.isascii() and value.isdigit() and int(value) >= 1):
            self.fail(f"expected a whole number of trials (at least 1) or 'all', got '{value}'", param, ctx)
        return int(value)


class _HostCounts(click.ParamType):
    """`--hosts 2,4,8`: whole numbers of hosts, at least 1 (adrun.profile.scaling.parse_host_counts)."""

    name = "N,N,..."

    def convert(self, value: list[int] | str, param: click.Parameter | None,
                ctx: click.Context | None) -> list[int]:
        from adrun.profile.scaling import parse_host_counts

        if isinstance(value, list):
            return value
        try:
            return parse_host_counts(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


def _reads_as_trial_count(text: str) -> bool:
    """Whether the word after a bare `--trials` is its value (else it is the script)."""
    return text == "all" or (text.isascii() and text.isdigit())


@main.command(
    "profile", cls=OptionsUpToScript,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@spec_option
@click.option("--trials", cls=OptionalValue, when_bare="all", is_value=_reads_as_trial_count, type=_TrialCount(),
              help="Also run the K best-predicted distinct plans (all when K is left out) for --trial-steps steps each.")
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE",
              help="Auto's option, repeatable: allow_lossy=true, allow_staleness=true.")
@click.option("--trial-steps", type=click.IntRange(min=2), default=30, show_default=True, metavar="N",
              help="Training steps per worker of each trial.")
@click.option("--hosts", "host_counts", type=_HostCounts(), default=None,
              help="Also predict every builder and Auto on N hosts of this cluster's kind, e.g. 2,4,8,16 (no runs).")
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE",
              help="With --hosts: draw the predicted examples/s against hosts as a PNG (needs matplotlib).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the recommended strategy document here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document on stdout.")
@click.option("--sync-code", is_flag=True,
              help="Copy the script's directory to every remote node first (as for a run).")
@allow_exposed_option
@records_options
@click.option("--job-id", metavar="ID", help="Name of the profiling run; trial N runs as ID-tN-<builder> (default: time-stamped).")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def profile(spec_path: str | None, trials: int | Literal["all"] | None, strategy_opts: tuple[str, ...], trial_steps: int,
            host_counts: list[int] | None, plot: str | None, output: str | None, as_json: bool, sync_code: bool, records_option: str | None, no_record: bool,
            measure_network: bool, allow_exposed: bool, job_id: str | None, script: str,
            script_args: tuple[str, ...]) -> None:
    """Profile SCRIPT, predict every strategy on the cluster (and try the best with --trials), and
    recommend one."""
    from adrun import ui
    from adrun.cli.interrupts import handling_interrupts
    from adrun.jobs.registry import check_job_id
    from adrun.launch.env import job_settings
    from adrun.launch.job.provision import RemoteNodes
    from adrun.profile.command import ProfileOptions
    from adrun.profile.command import profile as profile_script
    from adrun.profile.plot import require_matplotlib, write_scaling_plot
    from adrun.profile.scaling import require_host_path
    from adrun.profile.view import render
    from adrun.strategies.auto import Auto
    from adrun.strategies.document import dump_strategy

    job_id = check_job_id(job_id) if job_id is not None else new_job_id()
    job_settings(os.environ)  # a bad ADRUN_* setting is refused before anything starts, as by a run
    auto = Auto.from_cli(parse_strategy_options(strategy_opts)).options
    spec = load_cluster(spec_path)
    script_path = existing_script(script)
    if output and not Path(output).parent.is_dir():
        raise UserError(f"-o {output}: directory {Path(output).parent} does not exist")
    if plot is not None:
        if not host_counts:
            raise UserError(f"--plot {plot}: the plot shows the --hosts predictions; give --hosts too (e.g. --hosts 2,4,8)")
        if not Path(plot).parent.is_dir():
            raise UserError(f"--plot {plot}: directory {Path(plot).parent} does not exist")
        require_matplotlib()
    if host_counts:
        require_host_path(spec)
    options = ProfileOptions(trials=trials, trial_steps=trial_steps, auto=auto, hosts=tuple(host_counts or ()),
                             measure_network=measure_network, allow_exposed=allow_exposed,
                             command=shlex.join(["adrun", *sys.argv[1:]]),
                             spec_path=Path(spec_path) if spec_path else None)
    with handling_interrupts(), opened_records(records_option, no_record) as records, RemoteNodes(spec) as remote:
        check_fixed_ports(spec)
        remote.connect()
        remote.preflight(script_path, sync_code)
        report, plan = profile_script(spec, remote, script_path, list(script_args), job_id, options, records)
    if output:
        try:
            dump_strategy(plan, Path(output))
        except OSError as e:
            raise UserError(f"-o {output}: cannot write the strategy document: {e.strerror or e}") from None
    if plot is not None:
        assert report.scaling is not None
        write_scaling_plot(report.scaling, Path(plot), f"{Path(script).name}: predicted scaling")
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        render(report, ui.console, output)
