"""`adrun jobs`, `adrun stop JOB_ID`, `adrun logs JOB_ID`: the jobs started on this machine."""

from __future__ import annotations

import sys

import click

from adrun.cli.app import main
from adrun.cli.options import user_errors
from adrun.job_state import JobState


@main.command()
@click.option("--all", "include_ended", is_flag=True, help="Also list the ended jobs still recorded (the latest 100).")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@user_errors
def jobs(include_ended: bool, as_json: bool) -> None:
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
@user_errors
def stop(job_id: str) -> None:
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
    if ended.state == JobState.STOPPED:
        ui.print_status(f"job {ended.id} stopped (its launcher exited with code {ended.exit_code})")
    else:
        ui.print_status(f"job {ended.id} ended by itself before the stop took effect: {ended.state} "
                        f"(exit code {ended.exit_code})")


@main.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@user_errors
def logs(job_id: str, follow: bool) -> None:
    """Print the task logs of JOB_ID (or a unique prefix of it), which must have run with --log-dir.

    Each line is prefixed with its task's tag, as in the live view: workers first, then the PS.
    """
    from adrun.jobs.logs import show_logs
    from adrun.jobs.registry import open_jobs

    with open_jobs() as store:
        record = store.find(job_id)

        def still_running() -> bool:
            current = store.get(record.id)
            return current is not None and current.state == JobState.RUNNING

        show_logs(record, lambda tag, line: click.echo(f"[{tag}] {line}"), follow=follow, still_running=still_running)
