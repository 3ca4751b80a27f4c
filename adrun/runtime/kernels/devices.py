"""Device strings of the cluster's jobs (TF's own `/job:.../task:...` names, adrun/placement.py's),
and of the plain local session a worker that runs alone uses instead."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adrun.placement import ps, worker

if TYPE_CHECKING:
    from adrun.task_context import TaskContext

LOCAL_SESSION_TASK = "/job:localhost/replica:0/task:0"  # how a plain (non-distributed) session names its devices


def ps_device(task: int) -> str:
    return ps(task).device()


def worker_device(task: int, local: str = "CPU:0") -> str:
    """A device of worker `task`: its first CPU by default, else `local` (e.g. `GPU:1`)."""
    return worker(task).device(local)


def own_device(ctx: TaskContext, local: str = "CPU:0") -> str:
    """A device of this worker as its sessions name it: a task of the job's cluster, or the plain
    local session's when the worker runs alone (`TaskContext.runs_alone`)."""
    if ctx.runs_alone:
        return f"{LOCAL_SESSION_TASK}/device:{local}"
    return worker_device(ctx.task_index, local)


COLLECTIVE_GROUP_LEADER = "/job:worker/replica:0/task:0"
