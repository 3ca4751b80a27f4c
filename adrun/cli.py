"""The `adrun` command line.

`adrun [run options] SCRIPT [ARGS]...` runs a script on a cluster; `adrun strategy ...` builds and
shows strategy documents. User mistakes end as one `adrun: error:` line and a non-zero exit.
"""

from __future__ import annotations

import functools
import os
import sys
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from adrun import __version__
from adrun.errors import UserError

DEFAULT_STRATEGY = "PSLoadBalancing"
INTERRUPTED_EXIT_CODE = 130  # as the supervisor's, for an interrupt before the job started
RUNS_DIR = Path("/tmp/adrun-runs")
MAX_RESTARTS = 1000  # a bound that catches a typo (--max-restarts 10000000) rather than a real need
MAX_BACKOFF_S = 86400.0  # not /tmp/adrun: that would shadow the package when cwd is /tmp


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
    from adrun.launch.local import is_local_host
    from adrun.launch.ports import allocate_ports

    here = [is_local_host(n.address) for n in spec.nodes]
    if any(n.base_port is not None and mine for n, mine in zip(spec.nodes, here)):
        allocate_ports(spec, here)


def _plan(strategy: str, options: dict[str, str], script: Path, script_args: list[str], spec, job_id: str):
    """Capture the script's graph and turn it into a Strategy for this cluster.

    Everything that can be checked without the script (builder name and options, the document)
    is checked before the capture, which takes seconds.
    """
    from adrun import ui
    from adrun.capture_run import capture_graph
    from adrun.strategies import configured_builder
    from adrun.strategies.document import check_matches, load_strategy

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
@click.option("--strategy", default=DEFAULT_STRATEGY, show_default=True, help="Builder name or a strategy document (.yml).")
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE", help="Builder option; repeatable.")
@click.option("--quiet", is_flag=True, help="Do not print the processes' output (summary and errors only).")
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
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_user_errors
def run(spec_path, strategy, strategy_opts, quiet, log_dir, dry_run, shard_data, job_id, sync_code, stall_timeout,
        on_stall, max_restarts, restart_backoff, result_json, script, script_args) -> None:
    """Run SCRIPT with ARGS on every worker of the cluster."""
    from adrun.launch.provision import RemoteNodes

    spec = _load_cluster(spec_path)
    script_path = _existing_script(script)
    options = _parse_options(strategy_opts)
    with RemoteNodes(spec) as remote:
        if not dry_run:
            _check_fixed_ports(spec)
            remote.connect()
            remote.preflight(script_path, sync_code)
        _run_planned(spec, remote, strategy, options, script_path, list(script_args), job_id or _new_job_id(),
                     quiet=quiet, log_dir=log_dir, dry_run=dry_run, shard_data=shard_data,
                     stall_timeout=stall_timeout or None, result_json=Path(result_json) if result_json else None,
                     on_stall=on_stall, max_restarts=max_restarts, restart_backoff=restart_backoff)


def _run_planned(spec, remote, strategy: str, options: dict[str, str], script_path: Path, script_args: list[str],
                 job_id: str, *, quiet: bool, log_dir: str | None, dry_run: bool, shard_data: bool,
                 stall_timeout: float | None, result_json: Path | None, on_stall: str = "warn", max_restarts: int = 0,
                 restart_backoff: float = 5.0) -> None:
    """Capture, plan, and (unless `dry_run`) run the job, remote nodes through `remote`; the
    result is written as JSON to `result_json` and to `log_dir`/result.json when given."""
    from adrun import ui
    from adrun.launch.report import job_report, write_report
    from adrun.launch.restarts import run_job
    from adrun.launch.supervisor import JobConfig
    from adrun.strategies.document import dump_strategy

    item, plan = _plan(strategy, options, script_path, script_args, spec, job_id)
    job_dir = RUNS_DIR / job_id
    job_dir.mkdir(parents=True, exist_ok=True)
    strategy_file = job_dir / "strategy.yml"
    dump_strategy(plan, strategy_file)
    ui.print_plan(plan, item, spec)
    if dry_run:
        ui.print_status(f"dry run: strategy written to {strategy_file}; nothing started")
        return
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
            log_dir=Path(log_dir) if log_dir else None,
            stall_timeout_s=stall_timeout,
            on_stall=on_stall,
            max_restarts=max_restarts,
            restart_backoff_s=restart_backoff,
        ),
        remote,
    )
    report = job_report(result, job_id, plan.builder, strategy_file)
    for path in (result_json, Path(log_dir) / "result.json" if log_dir else None):
        if path is not None:
            write_report(report, path)
    sys.exit(result.exit_code)


@main.group()
def strategy() -> None:
    """Build and show strategy documents."""


class _OptionsUpToScript(click.Command):
    """A command `NAME [OPTIONS] SCRIPT [ARGS]...`: adrun's options may come before or after the
    first argument, but everything after SCRIPT is the script's own (click alone would stop
    reading options at the first argument, so `build PS -o plan.yml train.py` would lose `-o`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {
            opt: not (param.is_flag or param.count)
            for param in self.get_params(ctx)
            if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)
        }
        options: list[str] = []
        positionals: list[str] = []
        i = 0
        while i < len(args) and len(positionals) < 2 and args[i] != "--":
            arg = args[i]
            name = arg.split("=", 1)[0]
            if name in takes_value:
                options.append(arg)
                if takes_value[name] and "=" not in arg and i + 1 < len(args):
                    options.append(args[i + 1])
                    i += 1
            elif arg.startswith("-") and len(positionals) < 2:
                options.append(arg)  # unknown here: click reports it (or it is -oVALUE)
            else:
                positionals.append(arg)
            i += 1
        return super().parse_args(ctx, [*options, *positionals, *args[i:]])


@strategy.command(
    "build", cls=_OptionsUpToScript,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("name")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False))
@click.option("--strategy-opt", "strategy_opts", multiple=True, metavar="KEY=VALUE")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Where to write the document.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_user_errors
def strategy_build(name, spec_path, strategy_opts, output, script, script_args) -> None:
    """Capture SCRIPT and write the plan of builder NAME to a document you can edit and run."""
    from adrun import ui
    from adrun.strategies.document import dump_strategy

    spec = _load_cluster(spec_path)
    item, plan = _plan(name, _parse_options(strategy_opts), _existing_script(script), list(script_args), spec, _new_job_id())
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
    from adrun.launch.check import run_checks
    from adrun.launch.check_report import render

    report = run_checks(_load_cluster(spec_path), script)
    if as_json:
        click.echo(report.to_json())
    else:
        render(report, ui.console)
    sys.exit(report.exit_code)
