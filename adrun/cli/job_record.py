"""The launcher's job in the record of jobs (adrun/jobs/registry.py), as the CLI keeps it.

The record returns its problems as data; here they become warnings. What SIGTERM (`adrun stop`)
does to the launcher meanwhile is `interrupts`' business; once the block ends, signals are
ignored, so the end's write is not cut short.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from adrun import ui
from adrun.cli.interrupts import INTERRUPTS
from adrun.jobs.registry import JobRecord, LauncherRecord


def warn(problem: str | None) -> None:
    """Show a problem of the record as a warning: the job goes on."""
    if problem is not None:
        ui.print_warning(problem)


@contextmanager
def recorded_job(record: JobRecord, home: Path | None = None) -> Iterator[LauncherRecord]:
    """Record the launcher's job `record` from entry to exit (its end read from how the block ends)."""
    launcher = LauncherRecord(record, home)
    warn(launcher.open())
    ended_by: BaseException | None = None
    try:
        yield launcher
    except BaseException as e:
        ended_by = e
        raise
    finally:
        # The job is over: a stop arriving now has nothing left to stop, and must not cut the
        # end's write short (the job would then show as lost).
        INTERRUPTS.ignore()
        warn(launcher.close(ended_by))
