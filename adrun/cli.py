"""The `adrun` command line.

`adrun [run options] SCRIPT [ARGS]...` runs a script on a cluster; `adrun strategy ...` builds and
shows strategy documents. User mistakes end as one `adrun: error:` line and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from adrun import __version__
from adrun.errors import UserError

DEFAULT_STRATEGY = "PSLoadBalancing"
INTERRUPTED_EXIT_CODE = 130  # as the supervisor's, for an interrupt before the job started
BROKEN_PIPE_EXIT_CODE = 141  # what a shell reports for a tool ended by SIGPIPE (128 + 13)
RUNS_DIR = Path("/tmp/adrun-runs")  # not /tmp/adrun: that would shadow the package when cwd is /tmp
MAX_RESTARTS = 1000  # a bound that catches a typo (--max-restarts 10000000) rather than a real need
MAX_BACKOFF_S = 86400.0


class _RunByDefault(click.Group):
    """`adrun train.py` means `adrun run train.py`: a first word that is no command starts a run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def _user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from adrun import ui

        try:
            return fn(*args, **kwargs)
        except UserError as e:
            ui.print_user_error(str(e))
            sys.exit(e.exit_code)
        except BrokenPipeError:
            # the reader of our stdout left (`adrun logs JOB | head`): stop writing, quietly, as
            # a shell tool does; the redirect keeps Python's exit flush from failing again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(BROKEN_PIPE_EXIT_CODE)
        except KeyboardInterrupt:
            # Ctrl-C before the job runs (during capture, say): whatever was started is stopped by
            # the `finally` blocks it unwound; say so shell-style instead of click's "Aborted!" (1).
            ui.print_status("interrupted")
            sys.exit(INTERRUPTED_EXIT_CODE)

    return wrapper


def _parse_options(pairs: tuple[str, ...]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--strategy-opt '{pair}': expected KEY=VALUE, e.g. --strategy-opt chunk_size=64")
        options[key.strip()] = value.strip()
    return options


def _load_cluster(spec_path: str | None):
    from adrun.spec import default_local_spec, load_spec

    return load_spec(Path(spec_path)) if spec_path else default_local_spec()


def _existing_script(script: str) -> Path:
    path = Path(script)
    if not path.is_file():
        raise UserError(f"script '{script}' not found (looked in {Path.cwd()})")
    return path


def _check_fixed_ports(spec) -> None:
    """Refuse a spec whose fixed ports (base_port) on this machine are taken now, before the
    capture takes seconds.

    The ports are released again at once and claimed for real when the job starts. Other nodes'
    fixed ports are checked over SSH (`RemoteNodes.preflight`).
    """
    from adrun.launch.nodes.hosts import is_local_host
    from adrun.launch.job.ports import allocate_ports

    here = [is_local_host(n.address) for n in spec.nodes]
    if any(n.base_port is not None and mine for n, mine in zip(spec.nodes, here)):
        allocate_ports(spec, here)


def _plan(strategy: str, options: dict[str, str], script: Path, script_args: list[str], spec, job_id: str, *,
          remote, records, measure_network: bool):
    """Capture the script's graph and turn it into a Strategy for this cluster.

    Everything that can be checked without the script (builder name and options, the document)
    is checked before the capture, which takes seconds. Auto profiles the script instead (the
    profile holds the captured graph) and plans with the records and the network facts
    (adrun/auto_plan.py).
    """
    from adrun import ui
    from adrun.capture_run import capture_graph
    from adrun.strategies import configured_builder
    from adrun.strategies.auto import AUTO
    from adrun.strategies.document import check_matches, load_strategy

    if strategy == AUTO:
        from adrun.auto_plan import auto_options, plan_automatically

        auto = plan_automatically(script, script_args, spec, remote, records, auto_options(options), job_id,
                                  measure_network=measure_network)
        return auto.profile.graph, auto.plan
    if _names_document(strategy):
        if options:
            raise UserError("--strategy-opt applies to a builder name, not to a strategy document")
        plan = load_strategy(Path(strategy))
        ui.print_status(f"capturing the graph of {script} ...")
        item = capture_graph(script, script_args, spec.num_workers, job_id)
        check_matches(plan, item, spec, source=strategy)
        return item, plan
    builder = configured_builder(strategy, options)
    ui.print_status(f"capturing the graph of {script} ...")
    item = capture_graph(script, script_args, spec.num_workers, job_id)
    return item, builder.build(item, spec)


def _names_document(strategy: str) -> bool:
    """Whether `--strategy` names a strategy document rather than a builder. A name the file system
    cannot even look up (too long, say) is no document: it is then reported as an unknown builder."""
    if strategy.endswith((".yml", ".yaml")):
        return True
    try:
        return Path(strategy).is_file()
    except OSError:
        return False


def _records_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--records PATH`, `--no-record` and `--measure-network`, shared by the commands that read or add records."""
    command = click.option("--measure-network", is_flag=True,
                           help="Auto's cost model: measure the network even if facts of this cluster are recorded.")(command)
    command = click.option("--no-record", is_flag=True,
                           help="Neither read nor add to the records database (no trial is recorded).")(command)
    return click.option("--records", "records_option", type=click.Path(dir_okay=False), metavar="PATH",
                        help="Records database (default: $ADRUN_RECORDS, else ~/.adrun/records.sqlite).")(command)


@contextmanager
def _opened_records(option: str | None, no_record: bool, needed: bool = True) -> Iterator[Any]:
    """The records database the options name, open for the command's duration; None with
    --no-record or when the command does not `need` it this time."""
    from adrun.records.store import open_records, records_path

    if no_record and option:
        raise UserError("--records and --no-record contradict each other; give one of them")
    if no_record or not needed:
        yield None
        return
    with open_records(records_path(option)) as records:
        yield records


def _new_job_id() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


@click.group(cls=_RunByDefault, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="adrun")
def main() -> None:
    """Run an unmodified TensorFlow graph-mode script data-parallel on a cluster.

    \b
      adrun train.py                       this machine as a local cluster
      adrun --spec cluster.yml --strategy AllReduce train.py --epochs 3
      adrun strategy build PS --spec cluster.yml -o plan.yml train.py
    """


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False), help="Cluster spec YAML (default: this machine, 2 workers + 1 PS).")
@click.option("--strategy", default=DEFAULT_STRATEGY, show_default=True, help="Builder name (Auto: chosen per variable by the cost model) or a strategy document (.yml).")
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE", help="Builder option; repeatable.")
@click.option("--quiet", is_flag=True, help="Do not print the processes' output (summary and errors only).")
@click.option("--verbose", is_flag=True,
              help="Show every line the processes print, TensorFlow's start-up messages too (folded by default).")
@click.option("--log-dir", type=click.Path(file_okay=False), help="Also write one log file per process here.")
@click.option("--dry-run", is_flag=True, help="Capture and plan, print the plan and the processes, start nothing.")
@click.option("--shard-data", is_flag=True, help="Give each worker a disjoint shard of the script's tf.data input (same as ADRUN_SHARD_DATA=1).")
@click.option("--job-id", help="Name of this run (default: time-stamped); every process carries it as ADRUN_JOB_ID.")
@click.option("--sync-code", is_flag=True,
              help="Copy the script's directory to every remote node first (no .git, __pycache__, .venv, *.pyc; max 50 MB).")
@click.option("--stall-timeout", type=click.FloatRange(min=0), default=300, show_default=True, metavar="SECONDS",
              help="Warn when a worker makes no training step for this long (0: never).")
@click.option("--on-stall", type=click.Choice(["warn", "fail"]), default="warn", show_default=True,
              help="What a stall does: a warning, or the job's failure (restarted when restarts are allowed).")
@click.option("--max-restarts", type=click.IntRange(min=0, max=MAX_RESTARTS), default=0, show_default=True, metavar="N",
              help="Start the job again after a failure a restart can cure (a killed task, a lost node, a dead "
                   "peer, a stall), at most N times.")
@click.option("--restart-backoff", type=click.FloatRange(min=0, max=MAX_BACKOFF_S), default=5, show_default=True,
              metavar="SECONDS", help="Wait this long before each restart.")
@click.option("--result-json", type=click.Path(dir_okay=False), metavar="PATH",
              help="Write the job's result (per task exit, steps, rates, bytes per node) here as JSON.")
@click.option("--max-steps", type=click.IntRange(min=1), metavar="N",
              help="End every worker cleanly after its Nth training step (same as ADRUN_MAX_STEPS=N).")
@_records_options
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_user_errors
def run(spec_path, strategy, strategy_opts, quiet, verbose, log_dir, dry_run, shard_data, job_id, sync_code,
        stall_timeout, on_stall, max_restarts, restart_backoff, result_json, max_steps, records_option, no_record,
        measure_network, script, script_args) -> None:
    """Run SCRIPT with ARGS on every worker of the cluster."""
    from adrun.jobs.registry import LauncherRecord, check_job_id, new_record
    from adrun.launch.env import MAX_STEPS_VAR
    from adrun.launch.env import max_steps as max_steps_setting
    from adrun.launch.job.provision import RemoteNodes

    spec = _load_cluster(spec_path)
    script_path = _existing_script(script)
    options = _parse_options(strategy_opts)
    job_id = check_job_id(job_id) if job_id is not None else _new_job_id()
    if max_steps is not None:
        os.environ[MAX_STEPS_VAR] = str(max_steps)  # an ADRUN_* setting: passes through to every task
    max_steps_setting(os.environ)  # refuse a bad ADRUN_MAX_STEPS before anything starts
    recorded = None if dry_run else LauncherRecord(new_record(
        job_id, shlex.join(["adrun", *sys.argv[1:]]), spec=Path(spec_path) if spec_path else None,
        script=script_path, nodes=[node.address for node in spec.nodes], log_dir=Path(log_dir) if log_dir else None))
    with (recorded or contextlib.nullcontext(), _opened_records(records_option, no_record) as records,
          RemoteNodes(spec) as remote):
        if not dry_run:
            _check_fixed_ports(spec)
            remote.connect()
            remote.preflight(script_path, sync_code)
        result = _run_planned(spec, remote, strategy, options, script_path, list(script_args), job_id,
                              quiet=quiet, verbose=verbose, log_dir=log_dir, dry_run=dry_run, shard_data=shard_data,
                              stall_timeout=stall_timeout or None, result_json=Path(result_json) if result_json else None,
                              records=records, measure_network=measure_network, on_stall=on_stall,
                              max_restarts=max_restarts, restart_backoff=restart_backoff,
                              on_attempt=recorded.attempt_started if recorded is not None else None)
        if result is not None and recorded is not None:
            state = "interrupted" if result.interrupted else "succeeded" if result.exit_code == 0 else "failed"
            recorded.ended(state, result.exit_code)
    if result is not None:
        sys.exit(result.exit_code)


def _run_planned(spec, remote, strategy: str, options: dict[str, str], script_path: Path, script_args: list[str],
                 job_id: str, *, quiet: bool, verbose: bool, log_dir: str | None, dry_run: bool, shard_data: bool,
                 stall_timeout: float | None, result_json: Path | None, records, measure_network: bool,
                 on_stall: str, max_restarts: int, restart_backoff: float,
                 on_attempt: Callable[[int], None] | None = None):
    """Capture, plan, and (unless `dry_run`) run the job, remote nodes through `remote`; the
    result is written as JSON to `result_json` and to `log_dir`/result.json when given, added
    to `records` (unless None), and returned (None for a dry run)."""
    from adrun import ui
    from adrun.launch.job.report import job_report, write_report
    from adrun.launch.job.restarts import run_job
    from adrun.launch.job.supervisor import JobConfig
    from adrun.records.recording import workload_name
    from adrun.strategies.document import dump_strategy

    item, plan = _plan(strategy, options, script_path, script_args, spec, job_id, remote=remote, records=records,
                       measure_network=measure_network)
    job_dir = RUNS_DIR / job_id
    job_dir.mkdir(parents=True, exist_ok=True)
    strategy_file = job_dir / "strategy.yml"
    dump_strategy(plan, strategy_file)
    ui.print_plan(plan, item, spec)
    if dry_run:
        ui.print_status(f"dry run: strategy written to {strategy_file}; nothing started")
        return None
    if shard_data:
        os.environ["ADRUN_SHARD_DATA"] = "1"  # an ADRUN_* setting: passes through to every task
    result = run_job(
        JobConfig(
            job_id=job_id,
            spec=spec,
            script=script_path,
            script_args=script_args,
            strategy_file=strategy_file,
            quiet=quiet,
            show_tf_noise=verbose,
            log_dir=Path(log_dir) if log_dir else None,
            stall_timeout_s=stall_timeout,
            on_stall=on_stall,
            max_restarts=max_restarts,
            restart_backoff_s=restart_backoff,
            on_attempt=on_attempt,
        ),
        remote,
    )
    report = job_report(result, job_id, plan.builder, strategy_file)
    for path in (result_json, Path(log_dir) / "result.json" if log_dir else None):
        if path is not None:
            write_report(report, path)
    if records is not None:
        _record(records, report, spec, plan, workload_name(script_path, script_args), item.batch_size)
    return result


def _record(records, report, spec, plan, workload: str, batch_size: int | None) -> None:
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


@main.group()
def strategy() -> None:
    """Build and show strategy documents."""


class _OptionsUpToScript(click.Command):
    """A command `NAME [OPTIONS] SCRIPT [ARGS]...`: adrun's options may come before or after the
    first argument, but everything after SCRIPT is the script's own (click alone would stop
    reading options at the first argument, so `build PS -o plan.yml train.py` would lose `-o`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        options_by_name = {opt: param for param in params if isinstance(param, click.Option)
                           for opt in (*param.opts, *param.secondary_opts)}
        fixed = sum(1 for param in params if isinstance(param, click.Argument) and param.nargs == 1)
        options: list[str] = []
        positionals: list[str] = []
        i = 0
        while i < len(args) and len(positionals) < fixed and args[i] != "--":
            arg = args[i]
            name = arg.split("=", 1)[0]
            param = options_by_name.get(name)
            if isinstance(param, _OptionalValue) and "=" not in arg:
                # `--trials 3 train.py` or `--trials train.py`: a value only when it reads as one
                if i + 1 < len(args) and param.is_value(args[i + 1]):
                    arg = f"{name}={args[i + 1]}"
                    i += 1
                else:
                    arg = f"{name}={param.when_bare}"
                options.append(arg)
            elif param is not None:
                options.append(arg)
                if not (param.is_flag or param.count) and "=" not in arg and i + 1 < len(args):
                    options.append(args[i + 1])
                    i += 1
            elif arg.startswith("-"):
                options.append(arg)  # unknown here: click reports it (or it is -oVALUE)
            else:
                positionals.append(arg)
            i += 1
        return super().parse_args(ctx, [*options, *positionals, *args[i:]])


class _OptionalValue(click.Option):
    """An option whose value may be left out (`--trials` or `--trials 3`): bare, it means
    `when_bare`. Only `_OptionsUpToScript` commands parse it (click alone would take the script's
    name as the value)."""

    def __init__(self, *args: Any, when_bare: str, is_value: Callable[[str], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.when_bare = when_bare
        self.is_value = is_value


@strategy.command(
    "build", cls=_OptionsUpToScript,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("name")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False))
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Where to write the document.")
@_records_options
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_user_errors
def strategy_build(name, spec_path, strategy_opts, output, records_option, no_record, measure_network, script,
                   script_args) -> None:
    """Capture SCRIPT and write the plan of builder NAME to a document you can edit and run."""
    from adrun import ui
    from adrun.launch.job.provision import RemoteNodes
    from adrun.strategies.auto import AUTO
    from adrun.strategies.document import dump_strategy

    spec = _load_cluster(spec_path)
    script_path = _existing_script(script)
    options = _parse_options(strategy_opts)
    # only Auto reads the records: another builder's plan must not depend on (or create) the file
    with _opened_records(records_option, no_record, needed=name == AUTO) as records, RemoteNodes(spec) as remote:
        item, plan = _plan(name, options, script_path, list(script_args), spec, _new_job_id(), remote=remote,
                           records=records, measure_network=measure_network)
    dump_strategy(plan, Path(output))
    ui.print_plan(plan, item, spec)
    ui.print_status(f"wrote {output}")


@strategy.command("show")
@click.argument("document", type=click.Path(dir_okay=False))
@_user_errors
def strategy_show(document) -> None:
    """Print a strategy document as a table."""
    from adrun import ui
    from adrun.strategies.document import load_strategy

    ui.print_plan(load_strategy(Path(document)), None, None)


class _TrialCount(click.ParamType):
    """`--trials K`: a whole number >= 1, or `all`."""

    name = "K"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if value == "all" or isinstance(value, int):
            return value
        if not (value.isascii() and value.isdigit() and int(value) >= 1):
            self.fail(f"expected a whole number of trials (at least 1) or 'all', got '{value}'", param, ctx)
        return int(value)


def _reads_as_trial_count(text: str) -> bool:
    """Whether the word after a bare `--trials` is its value (else it is the script)."""
    return text == "all" or (text.isascii() and text.isdigit())


@main.command(
    "profile", cls=_OptionsUpToScript,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False), help="Cluster spec YAML (default: this machine, 2 workers + 1 PS).")
@click.option("--trials", cls=_OptionalValue, when_bare="all", is_value=_reads_as_trial_count, type=_TrialCount(),
              help="Also run the K best-predicted distinct plans (all when K is left out) for --trial-steps steps each.")
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE",
              help="Auto's option, repeatable: allow_lossy=true, allow_staleness=true.")
@click.option("--trial-steps", type=click.IntRange(min=2), default=30, show_default=True, metavar="N",
              help="Training steps per worker of each trial.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the recommended strategy document here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document on stdout.")
@click.option("--sync-code", is_flag=True,
              help="Copy the script's directory to every remote node first (as for a run).")
@_records_options
@click.option("--job-id", help="Name of the profiling run; trial N runs as ID-tN-<builder> (default: time-stamped).")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_user_errors
def profile(spec_path, trials, strategy_opts, trial_steps, output, as_json, sync_code, records_option, no_record,
            measure_network, job_id, script, script_args) -> None:
    """Profile SCRIPT, predict every strategy on the cluster (and try the best with --trials), and
    recommend one."""
    from adrun import ui
    from adrun.launch.job.provision import RemoteNodes
    from adrun.profile.command import ProfileOptions, profile as profile_script
    from adrun.auto_plan import auto_options
    from adrun.jobs.registry import check_job_id
    from adrun.profile.view import render
    from adrun.strategies.document import dump_strategy

    job_id = check_job_id(job_id) if job_id is not None else _new_job_id()
    auto = auto_options(_parse_options(strategy_opts))
    spec = _load_cluster(spec_path)
    script_path = _existing_script(script)
    if output and not Path(output).parent.is_dir():
        raise UserError(f"-o {output}: directory {Path(output).parent} does not exist")
    options = ProfileOptions(trials=trials, trial_steps=trial_steps, runs_dir=RUNS_DIR, auto=auto,
                             measure_network=measure_network)
    with _opened_records(records_option, no_record) as records, RemoteNodes(spec) as remote:
        _check_fixed_ports(spec)
        remote.connect()
        remote.preflight(script_path, sync_code)
        report, plan = profile_script(spec, remote, script_path, list(script_args), job_id, options, records)
    if output:
        try:
            dump_strategy(plan, Path(output))
        except OSError as e:
            raise UserError(f"-o {output}: cannot write the strategy document: {e.strerror or e}") from None
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        render(report, ui.console, output)


@main.group()
def cluster() -> None:
    """Inspect the nodes of a cluster spec."""


@cluster.command("check")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False), help="Cluster spec YAML (default: this machine).")
@click.option("--script", type=click.Path(dir_okay=False), help="Also check that this script exists on every node.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@_user_errors
def cluster_check(spec_path, script, as_json) -> None:
    """Check every node in parallel: SSH, host key, python and versions, ports, resources, clock, bandwidth.

    Exits 0 only when every check passes.
    """
    from adrun import ui
    from adrun.launch.check.cluster_check import run_checks
    from adrun.launch.check.report import render

    report = run_checks(_load_cluster(spec_path), script)
    if as_json:
        click.echo(report.to_json())
    else:
        render(report, ui.console)
    sys.exit(report.exit_code)


@main.command()
@click.option("--all", "include_ended", is_flag=True, help="Also list the ended jobs still recorded (the latest 100).")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@_user_errors
def jobs(include_ended, as_json) -> None:
    """List the jobs started on this machine: the running ones, newest first (all with --all).

    A job whose launcher died without recording the job's end (kill -9) shows as lost.
    """
    from adrun.jobs.registry import open_jobs
    from adrun.jobs.view import jobs_json, print_jobs

    with open_jobs() as store:
        records = store.jobs(include_ended)
    if as_json:
        click.echo(jobs_json(records))
    else:
        print_jobs(records, include_ended)


@main.command()
@click.argument("job_id")
@_user_errors
def stop(job_id) -> None:
    """Stop the running job JOB_ID (or a unique prefix of it) started on this machine.

    Its launcher tears the job down on every host as after Ctrl-C (and exits 130); this waits
    until the job's end is recorded. Exits 1 when the launcher is gone (the job is lost).
    """
    from adrun import ui
    from adrun.jobs.control import LostJob, clean_up_lost, stop_job
    from adrun.jobs.registry import open_jobs

    with open_jobs() as store:
        record = store.find(job_id)
        try:
            ended = stop_job(store, record)
        except LostJob as lost:
            ui.print_user_error(f"job {lost.record.id} is lost: its launcher (pid {lost.record.launcher_pid}) ended "
                                "without recording how the job ended (killed with SIGKILL?)")
            for line in clean_up_lost(lost.record):
                ui.print_status(line)
            sys.exit(1)
    if ended.state == "stopped":
        ui.print_status(f"job {ended.id} stopped (its launcher exited with code {ended.exit_code})")
    else:
        ui.print_status(f"job {ended.id} ended by itself before the stop took effect: {ended.state} "
                        f"(exit code {ended.exit_code})")


@main.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@_user_errors
def logs(job_id, follow) -> None:
    """Print the task logs of JOB_ID (or a unique prefix of it), which must have run with --log-dir.

    Each line is prefixed with its task's tag, as in the live view: workers first, then the PS.
    """
    from adrun.jobs.logs import show_logs
    from adrun.jobs.registry import open_jobs

    with open_jobs() as store:
        record = store.find(job_id)

        def still_running() -> bool:
            current = store.get(record.id)
            return current is not None and current.state == "running"

        show_logs(record, lambda tag, line: click.echo(f"[{tag}] {line}"), follow=follow, still_running=still_running)
