"""What the commands share: the error wrapper every command wears, options several commands take,
the parsing of `NAME [OPTIONS] SCRIPT [ARGS]...`, and the checks made before anything starts."""

from __future__ import annotations

import functools
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from adrun.errors import UserError
from adrun.exit_codes import BROKEN_PIPE_EXIT_CODE, INTERRUPTED_EXIT_CODE

if TYPE_CHECKING:
    from adrun.records.store import Records
    from adrun.spec import ClusterSpec


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Every command's ending for what is not its normal end: a UserError as one `adrun: error:`
    line and its exit code, a closed stdout as a shell tool's quiet 141, Ctrl-C as 130."""

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


def parse_strategy_options(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--strategy-opt KEY=VALUE`, repeated, as a dict."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--strategy-opt '{pair}': expected KEY=VALUE, e.g. --strategy-opt chunk_size=64")
        options[key.strip()] = value.strip()
    return options


def load_cluster(spec_path: str | None) -> ClusterSpec:
    """The cluster `--spec` names, or this machine as a local cluster."""
    from adrun.spec import default_local_spec, load_spec

    return load_spec(Path(spec_path)) if spec_path else default_local_spec()


def existing_script(script: str) -> Path:
    path = Path(script)
    if not path.is_file():
        raise UserError(f"script '{script}' not found (looked in {Path.cwd()})")
    return path


def new_job_id() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def check_fixed_ports(spec: ClusterSpec) -> None:
    """Refuse a spec whose fixed ports (base_port) on this machine are taken now, before the
    capture takes seconds.

    The ports are released again at once and claimed for real when the job starts. Other nodes'
    fixed ports are checked over SSH (`RemoteNodes.preflight`).
    """
    from adrun.launch.nodes.hosts import is_local_host
    from adrun.launch.job.ports import allocate_ports

    here = [node for node in spec.nodes if is_local_host(node.address)]
    if any(node.base_port is not None for node in here):
        allocate_ports(here)


spec_option = click.option("--spec", "spec_path", type=click.Path(dir_okay=False),
                           help="Cluster spec YAML (default: this machine, 2 workers + 1 PS).")
"""The cluster a command plans for: `run`, `strategy build` and `profile` take it alike."""


allow_exposed_option = click.option(
    "--allow-exposed", is_flag=True,
    help="Leave the job's TensorFlow ports open to every host that can reach them (no packet-filter rule, no "
         "warning). Only on a network where every host is trusted: TF's servers run any graph they are sent.")
"""Commands that run jobs (`run`, `profile --trials`) take it alike; docs/security.md says why it exists."""


def records_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--records PATH`, `--no-record` and `--measure-network`, shared by the commands that read or add records."""
    command = click.option("--measure-network", is_flag=True,
                           help="Auto's cost model: measure the network even if facts of this cluster are recorded.")(command)
    command = click.option("--no-record", is_flag=True,
                           help="Neither read nor add to the records database (no trial is recorded).")(command)
    return click.option("--records", "records_option", type=click.Path(dir_okay=False), metavar="PATH",
                        help="Records database (default: $ADRUN_RECORDS, else ~/.adrun/records.sqlite).")(command)


@contextmanager
def opened_records(option: str | None, no_record: bool, needed: bool = True) -> Iterator[Records | None]:
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


class OptionsUpToScript(click.Command):
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
            if isinstance(param, OptionalValue) and "=" not in arg:
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


class OptionalValue(click.Option):
    """An option whose value may be left out (`--trials` or `--trials 3`): bare, it means
    `when_bare`. Only `OptionsUpToScript` commands parse it (click alone would take the script's
    name as the value)."""

    def __init__(self, *args: Any, when_bare: str, is_value: Callable[[str], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.when_bare = when_bare
        self.is_value = is_value
