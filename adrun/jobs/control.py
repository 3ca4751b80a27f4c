"""`adrun stop`: end a running job from another terminal, through its own launcher.

The launcher is the one process that knows every task of its job on every host, so stopping
means asking it: SIGTERM to the recorded launcher (after checking that the pid still is that
launcher), which then tears the job down exactly as after Ctrl-C. Nothing is matched by name.
When the launcher is gone (lost), what is left of the job on this machine is found and ended by
its ADRUN_JOB_ID, as the launcher's own final sweep would have; remote tasks end by themselves
once their keeper loses the launcher's connection.
"""

from __future__ import annotations

import signal
import time

import psutil

from adrun.errors import UserError
from adrun.job_state import JobState
from adrun.jobs.registry import JobRecord, JobStore
from adrun.launch.nodes.hosts import is_local_host
from adrun.launch.job.teardown import kill_leftovers

STOP_WAIT_S = 60.0  # teardown takes the tasks' grace (5 s), SIGKILL (2 s) and each node's sweep (<= 20 s)
_POLL_S = 0.1


class LostJob(Exception):
    """The job's launcher ended without recording the job's end."""

    def __init__(self, record: JobRecord) -> None:
        super().__init__(record.id)
        self.record = record


def stop_job(store: JobStore, record: JobRecord, wait_s: float = STOP_WAIT_S) -> JobRecord:
    """Ask `record`'s launcher to stop its job and wait until the job's end is recorded.

    Returns the ended record: "stopped", or how the job ended if it ended by itself meanwhile.
    Raises LostJob when the launcher is (or becomes) gone without recording the end, UserError
    when the job is not running or its launcher does not finish within `wait_s`.
    """
    if record.state == JobState.LOST:
        raise LostJob(record)
    if record.state.is_terminal():
        raise UserError(f"job {record.id} is not running: it ended {record.state}"
                        f"{f' at {record.ended:%Y-%m-%d %H:%M:%S} UTC' if record.ended else ''}; nothing to stop")
    launcher = record.launcher()
    if launcher is None:
        raise LostJob(store.get(record.id) or record)
    if store.request_stop(record.id):
        try:
            launcher.send_signal(signal.SIGTERM)  # psutil checks the start time again first
        except psutil.NoSuchProcess:
            pass  # it ended meanwhile: its record says how
        except psutil.AccessDenied:
            raise UserError(f"job {record.id}: not allowed to signal its launcher (pid {record.launcher_pid}, "
                            f"user {_owner(launcher)}); stop it as that user") from None
    deadline = time.monotonic() + wait_s
    while True:
        current = store.get(record.id)
        assert current is not None, f"job {record.id} disappeared from the record"
        if current.state == JobState.LOST:
            raise LostJob(current)
        if current.state.is_terminal():
            return current
        if time.monotonic() >= deadline:
            raise UserError(f"job {record.id}: its launcher (pid {record.launcher_pid}) was asked to stop but has "
                            f"not recorded the job's end after {wait_s:.0f} s; it may still be stopping remote "
                            "nodes (`adrun jobs` shows when it is done)")
        time.sleep(_POLL_S)


def _owner(proc: psutil.Process) -> str:
    try:
        return proc.username()
    except psutil.Error:
        return "unknown"


def clean_up_lost(record: JobRecord) -> list[str]:
    """For a lost job: end what is left of it on this machine (by ADRUN_JOB_ID) and say, one line
    each, what was found here and what happens to its tasks on other nodes."""
    left = kill_leftovers(record.id)
    lines = [f"ended {len(left)} process(es) of the job left on this machine (pids "
             f"{', '.join(str(p.pid) for p in left)})" if left else "no process of the job is left on this machine"]
    remote = [node for node in record.nodes if not is_local_host(node)]
    if remote:
        lines.append(f"its tasks on {', '.join(remote)} end by themselves: each one's keeper stops it when the "
                     "launcher's SSH connection closes, at the latest when its lease runs out")
    return lines
