"""The environment of every process adrun starts: a `TaskContext` (adrun/task_context.py, the
env contract of docs/architecture.md) written on top of the launcher's and the node's variables.

This is the only channel from the launcher to the runtime inside an unmodified script: every
"who am I" fact the runtime needs is a field of the context, and nothing else writes one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import adrun
from adrun.env_vars import CONTRACT_VARS, SETTING_VARS, Settings
from adrun.task_context import Mode, TaskContext

from .job.tasks import Task

# What adrun writes into a task's environment itself: never taken from the launcher's or a node's.
HOOK_DIR = Path(adrun.__file__).resolve().parent / "hook"  # put first on a local task's PYTHONPATH (`task_env`)
WRITTEN_BY_ADRUN = frozenset(CONTRACT_VARS + SETTING_VARS)


def job_settings(launcher_env: Mapping[str, str], *, shard_data: bool = False,
                 max_steps: int | None = None) -> Settings:
    """The settings of a job: those the launcher's environment sets (README: ADRUN_* settings pass
    through to every task), the command line's `--shard-data` and `--max-steps` winning. Called
    before anything starts, so a bad value in the environment is refused in one line."""
    settings = Settings.from_env(launcher_env)
    return replace(settings, shard_data=settings.shard_data or shard_data,
                   max_steps=max_steps if max_steps is not None else settings.max_steps)


def run_context(task: Task, job_id: str, num_workers: int, cluster_def: Mapping[str, list[str]], *,
                strategy_file: str | os.PathLike[str] | None, restart_count: int = 0,
                settings: Settings | None = None) -> TaskContext:
    """The context of `task` in attempt `restart_count` of a job's run: who it is, the cluster,
    the plan's file and the job's `settings` (None: the defaults)."""
    return TaskContext(
        mode=Mode.RUN, role=task.role, task_index=task.index, num_workers=num_workers, job_id=job_id,
        cluster=dict(cluster_def), strategy_file=None if strategy_file is None else str(strategy_file),
        restart_count=restart_count, settings=Settings() if settings is None else settings,
    )


def task_env(context: TaskContext, base_env: Mapping[str, str], *, hook_dir: str | None,
             node_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The full environment of the process `context` describes: `context.to_env()` on top of
    `base_env` (normally the launcher's own environment) and the node's `env`.

    Neither `base_env` nor the node's `env` can set a contract variable or a setting (a launcher
    started from inside another adrun process must not leak that job's identity, notably
    ADRUN_JOB_ID, which teardown uses to find processes); other variables pass through, the
    node's winning. `hook_dir` goes first on PYTHONPATH so Python imports adrun's sitecustomize
    before anything else; an existing PYTHONPATH (the node's, else the launcher's) follows it.
    None leaves the hook to the node (a remote task's keeper puts the node's own first).
    """
    merged = {**base_env, **{k: str(v) for k, v in (node_env or {}).items()}}
    env = {k: v for k, v in merged.items() if k not in WRITTEN_BY_ADRUN}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook_dir, env.get("PYTHONPATH", "")) if p)
    if not env["PYTHONPATH"]:
        del env["PYTHONPATH"]  # keep the node's own (e.g. from ssh.activate)
    env["PYTHONUNBUFFERED"] = "1"
    # TF's C++ INFO/WARNING lines (e.g. one rendezvous warning per distributed step) drown the
    # script's own output; a value the user set wins.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(context.to_env())
    return env


def gpu_visibility(role: str, index_on_node: int, gpus: int, replicas_per_worker: int) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for a task on a node with `gpus` GPUs: the `index_on_node`-th worker
    sees its own `replicas_per_worker` GPUs (as GPU:0.. inside the process), a PS sees none (it
    only holds and updates variables, and would otherwise reserve memory on every GPU)."""
    if not gpus:
        return {}
    if role != "worker":
        return {"CUDA_VISIBLE_DEVICES": ""}
    first = index_on_node * replicas_per_worker
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(first, first + replicas_per_worker))}


def forwarded_env(launcher_env: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """What a remote task takes from the launcher's environment: the variables named in the
    node's `ssh.forward_env` (an explicit allow list; a name not set here is not set there),
    plus the launcher's other ADRUN_* variables (adrun's settings among them: `remote_task_env`
    reads them, and a script may have its own). Nothing else crosses: the launcher's PATH, HOME or
    secrets mean nothing, or too much, on another machine."""
    wanted = set(names)
    return {k: v for k, v in launcher_env.items()
            if k in wanted or (k.startswith("ADRUN_") and k not in CONTRACT_VARS)}


def remote_task_env(context: TaskContext, launcher_env: Mapping[str, str], forward_env: Sequence[str],
                    node_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables set for the remote task `context` describes, on top of that node's own
    environment: those of `task_env` from what crosses to the node (`forwarded_env`); the hook
    directory is put in front of PYTHONPATH by the keeper on the node (`remote_agent`), from the
    node's adrun installation."""
    return task_env(context, forwarded_env(launcher_env, forward_env), hook_dir=None, node_env=node_env)
