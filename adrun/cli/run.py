"""`adrun [run options] SCRIPT [ARGS]...`: capture, plan, and run the job in the terminal.

The click options become one `RunOptions` once, holding the job's `JobConfig`, which goes on to
the restart loop, each attempt and its supervisor unchanged; from there the stages are functions
with typed inputs and outputs: `chosen_plan` and `plan_script` (GraphItem, Strategy),
`adrun.shown_job.run_shown` (JobResult, shown by ui while and after it runs), `job_report` (the
JobReport written as JSON and recorded). Ctrl-C and SIGTERM are handled once for the whole
command (`interrupts`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from adrun.cli.app import main
from adrun.cli.options import (
    allow_exposed_option,
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
from adrun.cli.planning import chosen_plan, plan_script
from adrun.defaults import RESTART_BACKOFF_S, STALL_TIMEOUT_S
from adrun.errors import UserError

if TYPE_CHECKING:
    from adrun.launch.job.config import JobConfig
    from adrun.launch.job.provision import RemoteNodes
    from adrun.launch.job.report import JobReport
    from adrun.launch.job.results import JobResult
    from adrun.records.store import Records
    from adrun.spec import ClusterSpec
    from adrun.strategies.document import Strategy

MAX_RESTARTS = 1000  # a bound that catches a typo (--max-restarts 10000000) rather than a real need
MAX_BACKOFF_S = 86400.0


@dataclass(frozen=True)
class RunOptions:
    """What `adrun run` was asked to do, checked: the job as the launcher runs it (`job`), and
    what the command does around it."""

    job: JobConfig
    strategy: str | None  # a builder name or a strategy document's path; None: the default for the script's kind
    strategy_options: dict[str, str]
    dry_run: bool = False
    result_json: Path | None = None
    measure_network: bool = False


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@spec_option
@click.option("--strategy", metavar="NAME|FILE", help="Builder name (Auto: chosen per variable by the cost model) or a "
              "strategy document (.yml). Default: Auto, for graph-mode and TF2 scripts (its plan remembered for "
              "the next start).")
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE", help="Builder option; repeatable.")
@click.option("--quiet", is_flag=True, help="Do not print the processes' output (summary and errors only).")
@click.option("--verbose", is_flag=True,
              help="Show every line the processes print: TensorFlow's start-up messages too (folded by default), and "
                   "every worker's Keras progress bars (by default the chief's, one line per epoch for the others).")
@click.option("--log-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Also write one log file per process here (w0.log, ps0.log, w1@host.log, ...).")
@click.option("--dry-run", is_flag=True, help="Capture and plan, print the plan and the processes, start nothing.")
@click.option("--shard-data", is_flag=True, help="Give each worker a disjoint shard of the script's tf.data input (same as ADRUN_SHARD_DATA=1).")
@click.option("--job-id", metavar="ID", help="Name of this run: letters, digits, . _ - (default: time-stamped); every "
              "process carries it as ADRUN_JOB_ID.")
@click.option("--sync-code", is_flag=True,
              help="Copy the script's directory to every remote node first (no .git, __pycache__, .venv, *.pyc; max 50 MB).")
@click.option("--stall-timeout", type=click.FloatRange(min=0), default=STALL_TIMEOUT_S, show_default=True, metavar="SECONDS",
              help="Warn when a worker makes no training step for this long (0: never).")
@click.option("--on-stall", type=click.Choice(["warn", "fail"]), default="warn", show_default=True,
              help="What a stall does: a warning, or the job's failure (restarted when restarts are allowed).")
@click.option("--max-restarts", type=click.IntRange(min=0, max=MAX_RESTARTS), default=0, show_default=True, metavar="N",
              help="Start the job again after a failure a restart can cure (a killed task, a lost node, a dead "
                   "peer, a stall), at most N times.")
@click.option("--restart-backoff", type=click.FloatRange(min=0, max=MAX_BACKOFF_S), default=RESTART_BACKOFF_S,
              show_default=True,
              metavar="SECONDS", help="Wait this long before each restart.")
@click.option("--result-json", type=click.Path(dir_okay=False), metavar="PATH",
              help="Write the job's result (per task exit, steps, rates, bytes per node) here as JSON.")
@click.option("--max-steps", type=click.IntRange(min=1), metavar="N",
              help="End every worker cleanly after its Nth training step (same as ADRUN_MAX_STEPS=N).")
@allow_exposed_option
@records_options
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def run(spec_path: str | None, strategy: str | None, strategy_opts: tuple[str, ...], quiet: bool, verbose: bool,
        log_dir: str | None, dry_run: bool, shard_data: bool, job_id: str | None, sync_code: bool,
        stall_timeout: float, on_stall: Literal["warn", "fail"], max_restarts: int, restart_backoff: float,
        result_json: str | None, max_steps: int | None, records_option: str | None, no_record: bool,
        measure_network: bool, allow_exposed: bool, script: str, script_args: tuple[str, ...]) -> None:
    """Run SCRIPT with ARGS on every worker of the cluster."""
    from adrun.cli.interrupts import handling_interrupts
    from adrun.cli.job_record import recorded_job, warn
    from adrun.home import run_dir
    from adrun.jobs.registry import check_job_id, new_record
    from adrun.launch.env import job_settings
    from adrun.launch.job.config import JobConfig
    from adrun.launch.job.provision import RemoteNodes

    spec = load_cluster(spec_path)
    script_path = existing_script(script)
    strategy_options = parse_strategy_options(strategy_opts)
    job_id = check_job_id(job_id) if job_id is not None else new_job_id()
    job = JobConfig(
        job_id=job_id, spec=spec, script=script_path, script_args=list(script_args),
        strategy_file=run_dir(job_id) / "strategy.yml", quiet=quiet, show_tf_noise=verbose,
        log_dir=Path(log_dir) if log_dir else None,
        settings=job_settings(os.environ, shard_data=shard_data, max_steps=max_steps),  # refuses a bad ADRUN_* one
        stall_timeout_s=stall_timeout or None, on_stall=on_stall,
        max_restarts=max_restarts, restart_backoff_s=restart_backoff, allow_exposed=allow_exposed,
    )
    options = RunOptions(job, strategy=strategy, strategy_options=strategy_options, dry_run=dry_run,
                         result_json=Path(result_json) if result_json else None, measure_network=measure_network)
    record = None if dry_run else new_record(
        job_id, shlex.join(["adrun", *sys.argv[1:]]), spec=Path(spec_path) if spec_path else None,
        script=job.script, nodes=[node.address for node in spec.nodes], log_dir=job.log_dir)
    with (handling_interrupts(),
          recorded_job(record) if record is not None else contextlib.nullcontext() as recorded,
          opened_records(records_option, no_record) as records, RemoteNodes(spec) as remote):
        if not dry_run:
            check_fixed_ports(spec)
            remote.connect()
            remote.preflight(job.script, sync_code)
        result = run_planned(remote, options, records,
                             on_attempt=(lambda number: warn(recorded.attempt_started(number)))
                             if recorded is not None else None)
        if result is not None and recorded is not None:
            recorded.ended(result.state, result.exit_code)
    if result is not None:
        sys.exit(result.exit_code)


def run_planned(remote: RemoteNodes, options: RunOptions, records: Records | None,
                on_attempt: Callable[[int], None] | None = None) -> JobResult | None:
    """Capture, plan, and (unless `options.dry_run`) run the job, other nodes through `remote`;
    the result is written as JSON to `options.result_json` and to the job's log_dir/result.json
    when given, added to `records` (unless None), and returned (None for a dry run)."""
    from adrun import ui
    from adrun.gathering import FactSources
    from adrun.launch.job.report import job_report, write_report
    from adrun.records.recording import workload_name
    from adrun.shown_job import run_shown
    from adrun.strategies.document import dump_strategy

    job = options.job
    item, plan = plan_script(
        chosen_plan(options.strategy, options.strategy_options),
        FactSources(job.script, job.script_args, job.spec, job.job_id, remote, records,
                    measure_network=options.measure_network))
    dump_strategy(plan, job.strategy_file)
    ui.print_plan(plan, item, job.spec)
    if options.dry_run:
        ui.print_status(f"dry run: strategy written to {job.strategy_file}; nothing started")
        return None
    result = run_shown(job, remote, on_attempt)
    report = job_report(result, job.job_id, plan.builder, job.strategy_file)
    for path in (options.result_json, job.log_dir / "result.json" if job.log_dir else None):
        if path is not None:
            write_report(report, path)
    if records is not None:
        _record(records, report, job.spec, plan, workload_name(job.script, job.script_args), item.batch_size)
    return result


def _record(records: Records, report: JobReport, spec: ClusterSpec, plan: Strategy, workload: str,
            batch_size: int | None) -> None:
    """Add the finished run to the records; a failure to do so is a warning, never the job's failure."""
    from pydantic import ValidationError

    from adrun import ui
    from adrun.records.recording import record_run

    try:
        number = record_run(records, report, spec, plan, workload, batch_size)
    except (UserError, ValidationError) as e:
        ui.print_warning(f"the run was not recorded: {e}")
        return
    if number is not None:
        ui.print_status(f"recorded as trial {number} in {records.path}")
