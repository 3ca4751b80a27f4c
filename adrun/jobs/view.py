"""`adrun jobs` in the terminal: one row per recorded job, newest first."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import TypeAdapter
from rich.console import Console
from rich.table import Table
from rich.text import Text

from adrun.job_state import JobState
from adrun.jobs.registry import JobRecord

_STATE_STYLES: dict[JobState, str] = {
    JobState.RUNNING: "bold cyan", JobState.SUCCEEDED: "green", JobState.FAILED: "red", JobState.STOPPED: "yellow",
    JobState.INTERRUPTED: "yellow", JobState.LOST: "bold red",
}


def jobs_json(records: list[JobRecord]) -> str:
    """The records as a JSON list (times in ISO 8601, UTC)."""
    return TypeAdapter(list[JobRecord]).dump_json(records, indent=2).decode()


def jobs_table(records: list[JobRecord], now: datetime | None = None) -> Table:
    """Id, state, exit code, start (local time), how long it ran (so far), launcher pid, the
    command; the attempt when a job was restarted. The JSON has every field (cwd, spec, log dir)."""
    now = now or datetime.now(timezone.utc)
    restarts = any(record.attempt for record in records)
    table = Table(title_justify="left")
    table.add_column("job", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("exit", justify="right")
    table.add_column("started", no_wrap=True)
    table.add_column("time", justify="right")
    if restarts:
        table.add_column("attempt", justify="right")
    table.add_column("pid", justify="right")
    table.add_column("command", overflow="fold")
    today = now.astimezone().date()
    for record in records:
        until = record.ended or (now if record.state == JobState.RUNNING else None)
        started = record.started.astimezone()
        row: list[str | Text] = [
            record.id,
            Text(record.state, style=_STATE_STYLES[record.state]),
            "-" if record.exit_code is None else str(record.exit_code),
            started.strftime("%H:%M:%S" if started.date() == today else "%Y-%m-%d %H:%M"),
            _duration((until - record.started).total_seconds()) if until else "-",
            *([str(record.attempt)] if restarts else []),
            str(record.launcher_pid) if record.state == JobState.RUNNING else "-",
            record.command,
        ]
        table.add_row(*row)
    return table


def print_jobs(records: list[JobRecord], include_ended: bool) -> None:
    """The table on stdout (it is the command's output), or a line saying there is nothing."""
    console = Console(highlight=False)
    if records:
        console.print(jobs_table(records))
    elif include_ended:
        console.print("no job recorded on this machine")
    else:
        console.print("no job running on this machine (`adrun jobs --all` also lists ended ones)")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
