"""Who a task is and what it is told: the launcher -> task half of the contract, as one object.

The launcher builds a `TaskContext` per process it starts and writes it into the process's
environment with `to_env()` (`adrun.launch.env.task_env` adds the node's own variables and the
hook); the runtime inside the unmodified script reads it back once with `from_env()`
(`adrun.runtime.context.current`). One class, one module, imported by both ends, so the shape
of the contract exists once: `from_env(c.to_env()) == c` (tests/unit/adrun/test_task_context.py).

This module imports neither TensorFlow nor `adrun.launch` nor the runtime: the runtime must not
pull in the launcher, and the launcher must not pull in TensorFlow. The variable names and the
parsing of single values are `adrun.env_vars`'.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from adrun.env_vars import (
    CAPTURE_ANSWER_FD_VAR, CAPTURE_OUT_VAR, CLUSTER_VAR, JOB_ID_VAR, MODE_VAR, NUM_WORKERS_VAR, PROFILE_STEPS_VAR, PROFILE_WARMUP_VAR,
    RELEASE_FD_VAR, RESTART_COUNT_VAR, ROLE_VAR, SCRATCH_DIR_VAR, STRATEGY_FILE_VAR, TASK_INDEX_VAR, WORKER_INDEX_VAR, Settings, choice,
    whole_number,
)
from adrun.errors import UserError
from adrun.placement import Role
from adrun.str_enum import StrEnum

if TYPE_CHECKING:
    from adrun.strategies.document import Strategy
    from adrun.strategies.plan_lookup import PlanIndex


class Mode(StrEnum):
    """What adrun's hook does in a process: run the job's task, capture the script's graph, or
    time a few of its steps (docs/architecture.md, "Runtime")."""

    RUN = "run"
    CAPTURE = "capture"
    PROFILE = "profile"


class AfterCapture(StrEnum):
    """The launcher's answer to a profiling process that was asked to wait at its capture point
    (`TaskContext.capture_answer_fd`) and reported its graph (`task_events.CapturedEvent`): end
    there (the plan is remembered, or needs no profile), or go on and profile the script. One line,
    the member's text, on that pipe; an end of file (the launcher is gone) reads as STOP.

    Why a pipe and not a second start: the capture and the profile are the same run of the script
    up to the capture point, and a start costs seconds of `import tensorflow` and graph building
    (bench/RESULTS-auto-start.md). Why not the script's stdin: the script may read its own."""

    STOP = "stop"
    PROFILE = "profile"

    def as_line(self) -> bytes:
        return f"{self.value}\n".encode()

    @classmethod
    def from_line(cls, data: bytes) -> AfterCapture:
        """The answer `data` (what was read before the end of file) says; STOP for anything else."""
        text = data.decode(errors="replace").strip()
        return cls.PROFILE if text == cls.PROFILE.value else cls.STOP


@dataclass(frozen=True)
class TaskContext:
    """Everything the launcher tells one process it starts (docs/architecture.md, "Env contract")."""

    mode: Mode
    role: Role
    task_index: int  # index within the role; a worker's is also its ADRUN_WORKER_INDEX (0 = chief)
    num_workers: int
    job_id: str
    cluster: dict[str, list[str]]  # TF job name -> "host:port" by task index; empty outside run mode
    strategy_file: str | None = None  # run mode: the plan's document
    capture_out: str | None = None  # capture and profile mode: where the process writes what it found
    profile_warmup: int = 0  # profile mode: training steps before the timed ones
    profile_steps: int = 0  # profile mode: measured training steps after the warm-up
    scratch_dir: str | None = None  # profile mode: where the script's checkpoint and summary writes go
    # profile mode: the pipe to read the launcher's AfterCapture from, after reporting the graph at
    # the point where capture mode would end; None: profile without asking
    capture_answer_fd: int | None = None
    restart_count: int = 0  # the job's attempt: 0 first, k after the k-th restart
    # run mode, a worker: the pipe the launcher releases it on at the finish barrier of a bounded
    # run (adrun/runtime/finish.py); set by whatever starts the process (it made the pipe), not
    # planned with the rest; None: the worker ends after its last step without waiting
    release_fd: int | None = None
    settings: Settings = field(default_factory=Settings)  # the job's settings (shard data, step bound, timeouts)

    def __post_init__(self) -> None:
        # `TaskContext(mode="run", role="worker", ...)` holds the enums too (ValueError on other text)
        object.__setattr__(self, "mode", Mode(self.mode))
        object.__setattr__(self, "role", Role(self.role))

    @property
    def is_chief(self) -> bool:
        return self.role == Role.WORKER and self.task_index == 0

    @property
    def runs_alone(self) -> bool:
        """One worker and no PS: no other task to exchange with, so the worker needs no server and
        its sessions are plain local ones."""
        return self.num_workers == 1 and not self.cluster.get("ps")

    @cached_property
    def strategy(self) -> Strategy:
        """The plan's document, loaded on first use (a run-mode worker's kernels read it)."""
        from adrun.strategies.document import load_strategy

        if not self.strategy_file:
            raise RuntimeError(f"adrun: {STRATEGY_FILE_VAR} is not set for a run-mode process")
        return load_strategy(self.strategy_file)

    @cached_property
    def plan(self) -> PlanIndex:
        """The plan's answers by variable name (which synchronizer, which partition)."""
        from adrun.strategies.plan_lookup import PlanIndex

        return PlanIndex(self.strategy)

    def to_env(self) -> dict[str, str]:
        """The contract's variables and the settings that say this context; `from_env` reads
        them back equal. An unset optional fact is left out, as is a setting at its default."""
        env = {
            MODE_VAR: self.mode.value,
            ROLE_VAR: self.role.value,
            TASK_INDEX_VAR: str(self.task_index),
            NUM_WORKERS_VAR: str(self.num_workers),
            JOB_ID_VAR: self.job_id,
            RESTART_COUNT_VAR: str(self.restart_count),
            CLUSTER_VAR: json.dumps(self.cluster, separators=(",", ":")),
        }
        if self.role == Role.WORKER:  # for the script: its data shard, like a rank
            env[WORKER_INDEX_VAR] = str(self.task_index)
        for name, text in ((STRATEGY_FILE_VAR, self.strategy_file), (CAPTURE_OUT_VAR, self.capture_out),
                           (SCRATCH_DIR_VAR, self.scratch_dir)):
            if text is not None:
                env[name] = text
        for name, count in ((PROFILE_WARMUP_VAR, self.profile_warmup), (PROFILE_STEPS_VAR, self.profile_steps)):
            if count:
                env[name] = str(count)
        for name, fd in ((CAPTURE_ANSWER_FD_VAR, self.capture_answer_fd), (RELEASE_FD_VAR, self.release_fd)):
            if fd is not None:
                env[name] = str(fd)
        env.update(self.settings.to_env())
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TaskContext:
        """The context `env` (default: this process's environment) describes; a bad value is a
        UserError naming its variable. ADRUN_MODE must be set: without it adrun's hook is inert."""
        env = os.environ if env is None else env
        if not env.get(MODE_VAR):
            raise UserError(f"{MODE_VAR} is not set: this process was not started by adrun")
        steps = "a whole number of training steps"
        return cls(
            mode=Mode(choice(env, MODE_VAR, "", tuple(Mode))),
            role=Role(choice(env, ROLE_VAR, Role.WORKER, tuple(Role))),
            task_index=whole_number(env, TASK_INDEX_VAR, 0, 0, "a whole-number task index"),
            num_workers=whole_number(env, NUM_WORKERS_VAR, 1, 1, "a whole number of workers"),
            job_id=env.get(JOB_ID_VAR, ""),
            cluster=_cluster(env.get(CLUSTER_VAR, "").strip() or "{}"),
            strategy_file=env.get(STRATEGY_FILE_VAR) or None,
            capture_out=env.get(CAPTURE_OUT_VAR) or None,
            profile_warmup=whole_number(env, PROFILE_WARMUP_VAR, 0, 0, steps),
            profile_steps=whole_number(env, PROFILE_STEPS_VAR, 0, 0, steps),
            scratch_dir=env.get(SCRATCH_DIR_VAR) or None,
            capture_answer_fd=_fd(env, CAPTURE_ANSWER_FD_VAR),
            restart_count=whole_number(env, RESTART_COUNT_VAR, 0, 0, "a whole-number attempt"),
            release_fd=_fd(env, RELEASE_FD_VAR),
            settings=Settings.from_env(env),
        )


def _fd(env: Mapping[str, str], name: str) -> int | None:
    """A pipe's file descriptor the process inherited, or None when `name` is unset. Never stdin,
    stdout or stderr: the task closes the descriptor when done, which would take its own stdio."""
    if not env.get(name, "").strip():
        return None
    return whole_number(env, name, 0, 3, "a pipe's file descriptor (0-2 are stdin, stdout and stderr)")


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
