"""Who this process is and what it is told, read once from adrun's env contract (see
docs/architecture.md). The only place the runtime reads an ADRUN_* variable: the names and the
parsing are `adrun.env_vars`, the ones the launcher writes with."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from adrun.env_vars import (
    CAPTURE_OUT_VAR, CLUSTER_VAR, JOB_ID_VAR, MODE_VAR, MODES, NUM_WORKERS_VAR, PROFILE_STEPS_VAR,
    PROFILE_WARMUP_VAR, ROLE_VAR, ROLES, SCRATCH_DIR_VAR, STRATEGY_FILE_VAR, TASK_INDEX_VAR, Settings, choice,
    whole_number,
)
from adrun.errors import UserError


@dataclass(frozen=True)
class TaskContext:
    mode: str  # "run", "capture" or "profile"
    role: str  # "worker" or "ps"
    task_index: int
    num_workers: int
    job_id: str
    cluster: dict[str, list[str]]
    strategy_file: str | None
    capture_out: str | None  # capture and profile mode: where the process writes what it found
    profile_warmup: int = 0  # profile mode: training steps before the timed ones
    profile_steps: int = 0  # profile mode: measured training steps after the warm-up
    scratch_dir: str | None = None  # profile mode: where the script's checkpoint and summary writes go
    settings: Settings = field(default_factory=Settings)  # the job's settings (shard data, step bound, timeouts)

    @property
    def is_chief(self) -> bool:
        return self.role == "worker" and self.task_index == 0

    @property
    def runs_alone(self) -> bool:
        """One worker and no PS: no other task to exchange with, so the worker needs no server and
        its sessions are plain local ones."""
        return self.num_workers == 1 and not self.cluster.get("ps")

    @cached_property
    def strategy(self):  # -> adrun.strategies.document.Strategy
        from adrun.strategies.document import load_strategy

        if not self.strategy_file:
            raise RuntimeError(f"adrun: {STRATEGY_FILE_VAR} is not set for a run-mode process")
        return load_strategy(self.strategy_file)

    @cached_property
    def plan(self):  # -> adrun.runtime.kernels.plan_lookup.PlanIndex
        from adrun.runtime.kernels.plan_lookup import PlanIndex

        return PlanIndex(self.strategy)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TaskContext:
        """The context `env` (default: this process's environment) describes; a bad value is a
        UserError naming its variable. ADRUN_MODE must be set: without it adrun's hook is inert."""
        env = os.environ if env is None else env
        if not env.get(MODE_VAR):
            raise UserError(f"{MODE_VAR} is not set: this process was not started by adrun")
        return cls(
            mode=choice(env, MODE_VAR, "", MODES),
            role=choice(env, ROLE_VAR, "worker", ROLES),
            task_index=whole_number(env, TASK_INDEX_VAR, 0, 0, "a whole-number task index"),
            num_workers=whole_number(env, NUM_WORKERS_VAR, 1, 1, "a whole number of workers"),
            job_id=env.get(JOB_ID_VAR, ""),
            cluster=_cluster(env.get(CLUSTER_VAR, "").strip() or "{}"),
            strategy_file=env.get(STRATEGY_FILE_VAR) or None,
            capture_out=env.get(CAPTURE_OUT_VAR) or None,
            profile_warmup=whole_number(env, PROFILE_WARMUP_VAR, 0, 0, "a whole number of training steps"),
            profile_steps=whole_number(env, PROFILE_STEPS_VAR, 0, 0, "a whole number of training steps"),
            scratch_dir=env.get(SCRATCH_DIR_VAR) or None,
            settings=Settings.from_env(env),
        )


def _cluster(text: str) -> dict[str, list[str]]:
    """ADRUN_CLUSTER: a JSON object of job name -> list of "host:port" addresses."""
    try:
        cluster = json.loads(text)
    except ValueError:
        cluster = None
    if not (isinstance(cluster, dict)
            and all(isinstance(tasks, list) and all(isinstance(a, str) for a in tasks) for tasks in cluster.values())):
        raise UserError(f"{CLUSTER_VAR}={text!r}: expected a JSON object of job name to a list of host:port")
    return cluster


_current: TaskContext | None = None


def current() -> TaskContext:
    global _current
    if _current is None:
        _current = TaskContext.from_env()
    return _current
