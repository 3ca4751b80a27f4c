"""`adrun cluster check`: every node of a cluster spec checked before a job needs it."""

from __future__ import annotations

import sys

import click

from adrun.cli.app import main
from adrun.cli.options import load_cluster, user_errors


@main.group()
def cluster() -> None:
    """Inspect the nodes of a cluster spec."""


@cluster.command("check")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False), help="Cluster spec YAML (default: this machine).")
@click.option("--script", type=click.Path(dir_okay=False), help="Also check that this script exists on every node.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@user_errors
def cluster_check(spec_path: str | None, script: str | None, as_json: bool) -> None:
    """Check every node in parallel: SSH, host key, versions, ports, exposure, resources, clock, bandwidth.

    Exits 0 only when every check passes.
    """
    from adrun import ui
    from adrun.launch.check.cluster_check import run_checks
    from adrun.launch.check.report import render

    report = run_checks(load_cluster(spec_path), script)
    if as_json:
        click.echo(report.to_json())
    else:
        render(report, ui.console)
    sys.exit(report.exit_code)
