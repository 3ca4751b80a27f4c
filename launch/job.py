"""What to start for a job: one command line, environment and directory per task.

Kept apart from supervision so the supervisor can run any list of commands (tests run plain
`python -c` tasks) and a future SSH launcher can reuse the same plan.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import adrun
from adrun.errors import UserError

from .env import task_env
from .local import is_local_host, ps_argv, worker_argv
from .ports import allocate_ports
from .tasks import Task, cluster_def, placements

HOOK_DIR = Path(adrun.__file__).resolve().parent / "hook"


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one task."""

    task: Task
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def plan_local_job(
    spec: Any,
    script: str | Path,
    script_args: Sequence[str],
    *,
    job_id: str,
    strategy_file: str | Path,
    cwd: str | Path | None = None,
    hook_dir: str | Path = HOOK_DIR,
    base_env: Mapping[str, str] | None = None,
) -> list[TaskLaunch]:
    """Launches for every task of `spec` in run mode, with ports reserved on this machine.

    Every node must be this machine until an SSH launcher exists; saying so now beats a task
    that cannot connect later.
    """
    remote = [node.address for node in spec.nodes if not is_local_host(node.address)]
    if remote:
        raise UserError(
            f"node {remote[0]} is not this machine: adrun can only start processes locally for now; "
            "use localhost (or this machine's address) for every node"
        )
    placed = placements(spec, allocate_ports(spec))
    tasks = [task for task, _ in placed]
    cluster = cluster_def(tasks)
    num_workers = sum(t.role == "worker" for t in tasks)
    workdir = Path(cwd) if cwd is not None else Path.cwd()
    launches = []
    for task, node in placed:
        python = node.python or sys.executable
        argv = worker_argv(python, script, script_args) if task.role == "worker" else ps_argv(python)
        env = task_env(
            task,
            job_id=job_id,
            num_workers=num_workers,
            cluster_def=cluster,
            mode="run",
            strategy_file=str(strategy_file),
            hook_dir=str(hook_dir),
            base_env=os.environ if base_env is None else base_env,
            node_env=node.env,
        )
        launches.append(TaskLaunch(task, argv, env, workdir))
    return launches
