"""The environment of every process adrun starts: the env contract of docs/architecture.md.

This is the only channel from the launcher to the runtime inside an unmodified script, so every
"who am I" fact the runtime needs is written here and nowhere else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from adrun.errors import UserError

from .job.tasks import Task

# Every variable of the contract; other ADRUN_* variables (settings such as ADRUN_INIT_TIMEOUT)
# pass through from the launcher's environment.
CONTRACT_VARS = (
    "ADRUN_WORKER_INDEX",
    "ADRUN_NUM_WORKERS",
    "ADRUN_ROLE",
    "ADRUN_JOB_ID",
    "ADRUN_RESTART_COUNT",
    "ADRUN_TASK_INDEX",
    "ADRUN_MODE",
    "ADRUN_CLUSTER",
    "ADRUN_STRATEGY_FILE",
    "ADRUN_CAPTURE_OUT",
    "ADRUN_PROFILE_WARMUP",
    "ADRUN_PROFILE_STEPS",
    "ADRUN_SCRATCH_DIR",
)

# A setting (not part of the contract): every worker ends after this many training steps.
MAX_STEPS_VAR = "ADRUN_MAX_STEPS"


def max_steps(env: Mapping[str, str]) -> int | None:
    """The step bound `ADRUN_MAX_STEPS` sets in `env`, None when it is unset or empty.

    Read by the launcher before anything starts (so a bad value is refused there, in one line) and
    by every worker's runtime, which ends the worker cleanly after that many training steps."""
    text = env.get(MAX_STEPS_VAR, "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise UserError(f"{MAX_STEPS_VAR}={text!r}: expected a whole number of training steps, 1 or more")
    return int(text)


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
) -> dict[str, str]:
    """The full environment for `task`, in attempt `restart_count` of the job (0: the first).

    Starts from `base_env` (normally the launcher's own environment) without the contract's
    variables, so a launcher started from inside another adrun process cannot leak that job's
    identity (notably ADRUN_JOB_ID, which teardown uses to find processes). The node's `env` is
    merged on top but cannot set the contract's variables either. `hook_dir` goes first on
    PYTHONPATH so Python imports adrun's sitecustomize before anything else; an existing
    PYTHONPATH (the node's, else the launcher's) follows it.
    """
    merged = {**base_env, **{k: str(v) for k, v in (node_env or {}).items()}}
    env = {k: v for k, v in merged.items() if k not in CONTRACT_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook_dir, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # TF's C++ INFO/WARNING lines (e.g. one rendezvous warning per distributed step) drown the
    # script's own output; a value the user set wins.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(
        ADRUN_MODE=mode,
        ADRUN_ROLE=task.role,
        ADRUN_TASK_INDEX=str(task.index),
        ADRUN_NUM_WORKERS=str(num_workers),
        ADRUN_JOB_ID=job_id,
        ADRUN_RESTART_COUNT=str(restart_count),
        ADRUN_CLUSTER=json.dumps(dict(cluster_def), separators=(",", ":")),
    )
    if task.role == "worker":
        env["ADRUN_WORKER_INDEX"] = str(task.index)
    if strategy_file is not None:
        env["ADRUN_STRATEGY_FILE"] = str(strategy_file)
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
    plus adrun's own ADRUN_* settings. Nothing else crosses: the launcher's PATH, HOME or
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
) -> dict[str, str]:
    """The variables set for `task` on a remote node, on top of that node's own environment.

    The contract and defaults are those of `task_env`; the hook directory is put in front of
    PYTHONPATH by the keeper on the node (`remote_agent`), from the node's adrun installation.
    """
    env = task_env(task, job_id, num_workers, cluster_def, "run", strategy_file, "",
                   forwarded_env(launcher_env, forward_env), node_env, restart_count)
    if not env["PYTHONPATH"]:
        del env["PYTHONPATH"]  # keep the node's own (e.g. from ssh.activate)
    return env
