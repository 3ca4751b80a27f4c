"""The worker's half of the finish barrier of a bounded run (ADRUN_MAX_STEPS).

A worker that ran its last step does not leave at once when its plan all-reduces: a ring peer may
still be fetching this worker's last chunk from its server, and would fail ("Socket closed") if
the server went away. So it tells the launcher it finished (`FinishedEvent`) and waits, process
and server up, until the launcher writes a line on its release pipe (`TaskContext.release_fd`):
the launcher does so once every worker has finished or exited (launch/job/finish_barrier.py).
The end of the pipe (the launcher is gone) releases it too. The wait has no timeout of its own:
the launcher bounds it (ADRUN_OP_TIMEOUT) and stops the job, this worker included, when it runs
out; a PS plan needs no barrier, since its PS tasks outlive the workers.

Imports nothing of TensorFlow, so it can be tested without it.
"""

from __future__ import annotations

import os

from adrun.runtime.reporting import report
from adrun.task_events import FinishedEvent


def wait_for_release(release_fd: int, steps: int) -> None:
    """Report that this worker ran its `steps` steps, then block until the launcher releases it
    (a line on `release_fd`) or the pipe ends."""
    report(FinishedEvent(steps))
    with os.fdopen(release_fd, "rb", buffering=0, closefd=True) as pipe:
        while (chunk := pipe.read(64)) and b"\n" not in chunk:
            pass
