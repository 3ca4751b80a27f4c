"""The states of a job, shared by what supervises it (`JobResult.state`) and what records it
(`adrun/jobs/registry.py`); a `StrEnum`, so SQLite, JSON and the terminal hold its text."""

from __future__ import annotations

from adrun.str_enum import StrEnum


class JobState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # interrupted by `adrun stop`
    INTERRUPTED = "interrupted"  # Ctrl-C or a signal to the launcher
    LOST = "lost"  # its launcher is gone without writing the end (killed by SIGKILL, the machine rebooted)

    def is_terminal(self) -> bool:
        """Whether the job has ended (a lost job has: nothing of it is left to stop)."""
        return self is not JobState.RUNNING
