"""The worker's half of the finish barrier of a bounded run (ADRUN_MAX_STEPS).

A worker that ran its last step does not leave at once when its plan all-reduces: a ring peer may
still be fetching this worker's last chunk from its server, and would fail ("Socket closed") if
the server went away. So it tells the launcher it finished (`FinishedEvent`) and waits, process
and server up, until the launcher writes a line on its release pipe (`TaskContext.release_fd`):
the launcher does so once every worker has finished or exited (launch/job/finish_barrier.py).
The end of the pipe (the launcher is gone) releases it too. The launcher bounds the wait
(ADRUN_OP_TIMEOUT from the first worker that finished) and stops the job, this worker included,
when it runs out; the worker bounds it too (twice that, from its own finish), since the launcher's
clock starts only with a `finished` event it heard: one this worker could not write (its stderr
closed) means no wait at all. A PS plan needs no barrier, since its PS tasks outlive the workers.

Imports nothing of TensorFlow, so it can be tested without it.
"""

from __future__ import annotations

import os
import select
import time

from adrun.runtime.reporting import report
from adrun.task_events import FinishedEvent


def wait_for_release(release_fd: int, steps: int, limit_s: float) -> None:
    """Report that this worker ran its `steps` steps, then block until the launcher releases it
    (a line on `release_fd`), the pipe ends, or `limit_s` pass (0: no limit); no wait when the
    report could not be written."""
    with os.fdopen(release_fd, "rb", buffering=0, closefd=True) as pipe:
        if not report(FinishedEvent(steps)):
            return
        deadline = time.monotonic() + limit_s if limit_s else None
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            if select.select([pipe], [], [], left)[0]:
                chunk = pipe.read(64)
                if not chunk or b"\n" in chunk:
                    return
