"""Who this process is, read once from adrun's env contract (see docs/architecture.md)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property


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
            raise RuntimeError("adrun: ADRUN_STRATEGY_FILE is not set for a run-mode process")
        return load_strategy(self.strategy_file)

    @cached_property
    def plan(self):  # -> adrun.runtime.kernels.plan_lookup.PlanIndex
        from adrun.runtime.kernels.plan_lookup import PlanIndex

        return PlanIndex(self.strategy)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> TaskContext:
        env = dict(os.environ) if env is None else env
        return cls(
            mode=env["ADRUN_MODE"],
            role=env.get("ADRUN_ROLE", "worker"),
            task_index=int(env.get("ADRUN_TASK_INDEX", "0")),
            num_workers=int(env.get("ADRUN_NUM_WORKERS", "1")),
            job_id=env.get("ADRUN_JOB_ID", ""),
            cluster=json.loads(env.get("ADRUN_CLUSTER", "{}")),
            strategy_file=env.get("ADRUN_STRATEGY_FILE"),
            capture_out=env.get("ADRUN_CAPTURE_OUT"),
            profile_warmup=int(env.get("ADRUN_PROFILE_WARMUP", "0")),
            profile_steps=int(env.get("ADRUN_PROFILE_STEPS", "0")),
            scratch_dir=env.get("ADRUN_SCRATCH_DIR"),
        )


_current: TaskContext | None = None


def current() -> TaskContext:
    global _current
    if _current is None:
        _current = TaskContext.from_env()
    return _current
