"""The launcher's job in the record of jobs (adrun/jobs/registry.py), as the CLI keeps it.

The record returns its problems as data; here they become warnings, and while the job is open
SIGTERM (what `adrun stop` sends) interrupts the launcher as Ctrl-C does: a job being captured or
connected unwinds through the same `finally` blocks and stops what it started; a supervised job
is stopped by the supervisor's own handler, which overrides this one meanwhile.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from adrun import ui
from adrun.jobs.registry import JobRecord, LauncherRecord


def warn(problem: str | None) -> None:
    """Show a problem of the record as a warning: the job goes on."""
    if problem is not None:
        ui.print_warning(problem)


@contextmanager
def recorded_job(record: JobRecord, home: Path | None = None) -> Iterator[LauncherRecord]:
    """Record the launcher's job `record` from entry to exit (its end read from how the block
    ends), SIGTERM interrupting the block meanwhile (only the main thread can handle signals)."""
    handling = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if handling else None
    try:
        launcher = LauncherRecord(record, home)
        warn(launcher.open())
        ended_by: BaseException | None = None
        try:
            yield launcher
        except BaseException as e:
            ended_by = e
            raise
        finally:
            if handling:
                # The job is over: a stop arriving now has nothing left to stop, and must not cut the
                # end's write short (the job would then show as lost).
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            warn(launcher.close(ended_by))
    finally:
        if handling:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
