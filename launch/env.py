"""The environment of every process adrun starts: the env contract of docs/architecture.md.

This is the only channel from the launcher to the runtime inside an unmodified script, so every
"who am I" fact the runtime needs is written here and nowhere else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

from adrun.env_vars import (
    CAPTURE_OUT_VAR, CLUSTER_VAR, CONTRACT_VARS, JOB_ID_VAR, MODE_VAR, NUM_WORKERS_VAR, PROFILE_STEPS_VAR,
    PROFILE_WARMUP_VAR, RESTART_COUNT_VAR, ROLE_VAR, SCRATCH_DIR_VAR, SETTING_VARS, STRATEGY_FILE_VAR,
    TASK_INDEX_VAR, WORKER_INDEX_VAR, Settings,
)

from .job.tasks import Task

# What adrun writes into a task's environment itself: never taken from the launcher's or a node's.
WRITTEN_BY_ADRUN = frozenset(CONTRACT_VARS + SETTING_VARS)


def job_settings(launcher_env: Mapping[str, str], *, shard_data: bool = False,
                 max_steps: int | None = None) -> Settings:
    """The settings of a job: those the launcher's environment sets (README: ADRUN_* settings pass
    through to every task), the command line's `--shard-data` and `--max-steps` winning. Called
    before anything starts, so a bad value in the environment is refused in one line."""
    settings = Settings.from_env(launcher_env)
    return replace(settings, shard_data=settings.shard_data or shard_data,
                   max_steps=max_steps if max_steps is not None else settings.max_steps)


def task_env(
    task: Task,
    job_id: str,
    num_workers: int,
    cluster_def: Mapping[str, list[str]],
    mode: str,
    strategy_file: str | os.PathLike[str] | None,
    hook_dir: str,
    base_env: Mapping[str, str],
    node_env: Mapping[str, str] | None = None,
    restart_count: int = 0,
    *,
    settings: Settings | None = None,
    capture_out: str | None = None,
    scratch_dir: str | None = None,
    profile_warmup: int = 0,
    profile_steps: int = 0,
) -> dict[str, str]:
    """The full environment for `task`, in attempt `restart_count` of the job (0: the first).

    Starts from `base_env` (normally the launcher's own environment) without the contract's
    variables, so a launcher started from inside another adrun process cannot leak that job's
    identity (notably ADRUN_JOB_ID, which teardown uses to find processes). The node's `env` is
    merged on top but cannot set the contract's variables or the job's `settings` (None: those
    `base_env` sets). `hook_dir` goes first on PYTHONPATH so Python imports adrun's sitecustomize
    before anything else; an existing PYTHONPATH (the node's, else the launcher's) follows it.
    `capture_out` and `scratch_dir` (capture and profile mode) and the profile's step counts
    (profile mode) are the hook's instructions for a process that is not a job's task.
    """
    if settings is None:
        settings = Settings.from_env(base_env)
    merged = {**base_env, **{k: str(v) for k, v in (node_env or {}).items()}}
    env = {k: v for k, v in merged.items() if k not in WRITTEN_BY_ADRUN}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook_dir, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # TF's C++ INFO/WARNING lines (e.g. one rendezvous warning per distributed step) drown the
    # script's own output; a value the user set wins.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update({
        MODE_VAR: mode,
        ROLE_VAR: task.role,
        TASK_INDEX_VAR: str(task.index),
        NUM_WORKERS_VAR: str(num_workers),
        JOB_ID_VAR: job_id,
        RESTART_COUNT_VAR: str(restart_count),
        CLUSTER_VAR: json.dumps(dict(cluster_def), separators=(",", ":")),
    })
    if task.role == "worker":
        env[WORKER_INDEX_VAR] = str(task.index)
    if strategy_file is not None:
        env[STRATEGY_FILE_VAR] = str(strategy_file)
    if capture_out is not None:
        env[CAPTURE_OUT_VAR] = capture_out
    if scratch_dir is not None:
        env[SCRATCH_DIR_VAR] = scratch_dir
    if mode == "profile":
        env.update({PROFILE_WARMUP_VAR: str(profile_warmup), PROFILE_STEPS_VAR: str(profile_steps)})
    env.update(settings.to_env())
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


def remote_task_env(
    task: Task,
    job_id: str,
    num_workers: int,
    cluster_def: Mapping[str, list[str]],
    strategy_file: str | os.PathLike[str],
    launcher_env: Mapping[str, str],
    forward_env: Sequence[str],
    node_env: Mapping[str, str] | None = None,
    restart_count: int = 0,
    *,
    settings: Settings | None = None,
) -> dict[str, str]:
    """The variables set for `task` on a remote node, on top of that node's own environment.

    The contract, `settings` and defaults are those of `task_env`; the hook directory is put in
    front of PYTHONPATH by the keeper on the node (`remote_agent`), from the node's adrun
    installation.
    """
    env = task_env(task, job_id, num_workers, cluster_def, "run", strategy_file, "",
                   forwarded_env(launcher_env, forward_env), node_env, restart_count, settings=settings)
    if not env["PYTHONPATH"]:
        del env["PYTHONPATH"]  # keep the node's own (e.g. from ssh.activate)
    return env
