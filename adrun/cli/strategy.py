"""`adrun strategy build|show`: write a plan as a document to edit and run, or show one."""

from __future__ import annotations

from pathlib import Path

import click

from adrun.cli.app import main
from adrun.cli.options import (
    OptionsUpToScript,
    existing_script,
    load_cluster,
    new_job_id,
    opened_records,
    parse_strategy_options,
    records_options,
    spec_option,
    user_errors,
)
from adrun.cli.planning import chosen_plan, plan_script


@main.group()
def strategy() -> None:
    """Build and show strategy documents."""


@strategy.command(
    "build", cls=OptionsUpToScript,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("name")
@spec_option
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE", help="Builder option; repeatable.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Where to write the document.")
@records_options
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def strategy_build(name: str, spec_path: str | None, strategy_opts: tuple[str, ...], output: str,
                   records_option: str | None, no_record: bool, measure_network: bool, script: str,
                   script_args: tuple[str, ...]) -> None:
    """Capture SCRIPT and write the plan of builder NAME to a document you can edit and run."""
    from adrun import ui
    from adrun.gathering import FactSources
    from adrun.launch.job.provision import RemoteNodes
    from adrun.strategies.document import dump_strategy

    spec = load_cluster(spec_path)
    script_path = existing_script(script)
    chosen = chosen_plan(name, parse_strategy_options(strategy_opts))
    # only a builder that needs more than the graph (Auto) reads the records: another builder's
    # plan must not depend on (or create) the file
    with opened_records(records_option, no_record, needed=bool(chosen.needs)) as records, RemoteNodes(spec) as remote:
        item, plan = plan_script(chosen, FactSources(script_path, list(script_args), spec, new_job_id(), remote,
                                                     records, measure_network=measure_network))
    dump_strategy(plan, Path(output))
    ui.print_plan(plan, item, spec)
    ui.print_status(f"wrote {output}")


@strategy.command("show")
@click.argument("document", type=click.Path(dir_okay=False))
@user_errors
def strategy_show(document: str) -> None:
    """Print a strategy document as a table."""
    from adrun import ui
    from adrun.strategies.document import load_strategy

    ui.print_plan(load_strategy(Path(document)), None, None)
