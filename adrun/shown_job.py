"""A job run in the terminal: the launcher's stages composed with their presentation.

`adrun.launch.job.restarts.run_job` launches and supervises and returns a `JobResult`; it shows
nothing. `adrun.ui.JobView` shows a running job as its listener and `adrun.ui.print_result` shows
the result. `adrun run` and the trials of `adrun profile` both run their jobs through here, so they
see a job the same way and read the same result.
"""

from __future__ import annotations

from adrun import ui
from adrun.launch.job.provision import RemoteNodes
from adrun.launch.job.restarts import run_job
from adrun.launch.job.supervisor import JobConfig, JobResult


def run_shown(config: JobConfig, remote: RemoteNodes) -> JobResult:
    """Run `config`'s job (remote nodes through `remote`, already connected and checked) with the
    live view in the terminal, then print its summary and, when it failed, its root cause."""
    with ui.JobView(quiet=config.quiet) as view:
        result = run_job(config, remote, view)
    ui.print_result(result)
    return result
