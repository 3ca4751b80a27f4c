"""A job run in the terminal: the launcher's stages composed with their presentation.

`adrun.launch.job.restarts.run_job` launches and supervises and returns a `JobResult`; it shows
nothing. `adrun.ui.JobView` shows a running job as its listener and `adrun.ui.print_result` shows
the result. `adrun run` and the trials of `adrun profile` both run their jobs through here, so they
see a job the same way and read the same result.
"""

from __future__ import annotations

from collections.abc import Callable

from adrun import ui
from adrun.cli.interrupts import INTERRUPTS
from adrun.launch.job.config import JobConfig
from adrun.launch.job.provision import RemoteNodes
from adrun.launch.job.restarts import run_job
from adrun.launch.job.results import JobResult


def run_shown(config: JobConfig, remote: RemoteNodes, on_attempt: Callable[[int], None] | None = None) -> JobResult:
    """Run `config`'s job (remote nodes through `remote`, already connected and checked) with the
    live view in the terminal, then print its summary and, when it failed, its root cause.
    `on_attempt` is told the number of each attempt as it starts (the jobs registry records it).
    Ctrl-C or SIGTERM meanwhile stops the job in order (`interrupts`, when the command handles them)."""
    with _View(config.quiet, on_attempt) as view, INTERRUPTS.handed_down() as interrupt:
        result = run_job(config, remote, view, interrupt)
    ui.print_result(result)
    return result


class _View(ui.JobView):
    """ui's view of the job, which also passes each attempt's start on to `on_attempt`."""

    def __init__(self, quiet: bool, on_attempt: Callable[[int], None] | None) -> None:
        super().__init__(quiet=quiet)
        self._on_attempt = on_attempt

    def attempt_started(self, number: int, max_restarts: int) -> None:
        super().attempt_started(number, max_restarts)
        if self._on_attempt is not None:
            self._on_attempt(number)
