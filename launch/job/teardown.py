"""Stopping a job's processes, and proving none is left.

Stopping is by process group (each task leads its own), so whatever a task started goes with it.
The final proof looks for `ADRUN_JOB_ID=<job id>` in process environments, which every process of
the job inherits even when it left its task's group; processes are never matched by name.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import psutil

from ..nodes.node_tools import job_pids
from .process import TaskProcess

GRACE_S = 5.0
_KILL_WAIT_S = 2.0
_POLL_S = 0.05


def stop_processes(procs: Sequence[TaskProcess], grace_s: float = GRACE_S) -> None:
    """SIGTERM every group, give them `grace_s` to exit, then SIGKILL what is left.

    Returns within `grace_s` + ~2 s. Groups whose leader already exited are signalled too: a
    task's children may outlive it.
    """
    for proc in procs:
        proc.terminate_group()
    if not _wait_gone(procs, grace_s):
        for proc in procs:
            if proc.group_alive():
                proc.kill_group()
        _wait_gone(procs, _KILL_WAIT_S)


def _wait_gone(procs: Sequence[TaskProcess], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(p.group_alive() for p in procs):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def leftover_processes(job_id: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment says they belong to job `job_id`.

    Processes whose environment we may not read are skipped; so is the calling process. The
    scan is `node_tools.job_pids`, the same one the final sweep runs on remote nodes.
    """
    pids = set(job_pids(job_id))
    return [proc for proc in psutil.process_iter(["environ", "status"]) if proc.pid in pids]


def kill_leftovers(job_id: str, timeout_s: float = _KILL_WAIT_S) -> list[psutil.Process]:
    """SIGKILL every leftover process of `job_id` and wait (bounded) for them; returns them."""
    leftovers = leftover_processes(job_id)
    for proc in leftovers:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(leftovers, timeout=timeout_s)
    return leftovers
