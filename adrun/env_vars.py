"""The names of adrun's env contract and its typed settings, shared by both ends of it.

A task's context (`adrun.task_context.TaskContext`) is written into its environment by the
launcher and read back once by the runtime inside the unmodified script; both take the names and
the parsing of single values from here. This module imports neither TensorFlow nor `adrun.launch`: the
runtime must not pull in the launcher, and the launcher must not pull in TensorFlow.

A bad value is refused with the variable's name: a setting's by the launcher before anything
starts, a contract variable's (the launcher writes those itself) by the runtime.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from adrun.defaults import TASK_TIMEOUT_S
from adrun.errors import UserError

# The contract: who a process is. Written by the launcher alone (never taken from its environment).
WORKER_INDEX_VAR = "ADRUN_WORKER_INDEX"  # for the script: its data shard; the runtime reads TASK_INDEX
NUM_WORKERS_VAR = "ADRUN_NUM_WORKERS"
ROLE_VAR = "ADRUN_ROLE"
JOB_ID_VAR = "ADRUN_JOB_ID"
RESTART_COUNT_VAR = "ADRUN_RESTART_COUNT"  # for the script: which attempt this is
TASK_INDEX_VAR = "ADRUN_TASK_INDEX"
MODE_VAR = "ADRUN_MODE"
CLUSTER_VAR = "ADRUN_CLUSTER"
STRATEGY_FILE_VAR = "ADRUN_STRATEGY_FILE"
CAPTURE_OUT_VAR = "ADRUN_CAPTURE_OUT"
PROFILE_WARMUP_VAR = "ADRUN_PROFILE_WARMUP"
PROFILE_STEPS_VAR = "ADRUN_PROFILE_STEPS"
SCRATCH_DIR_VAR = "ADRUN_SCRATCH_DIR"
CAPTURE_ANSWER_FD_VAR = "ADRUN_CAPTURE_ANSWER_FD"
RELEASE_FD_VAR = "ADRUN_RELEASE_FD"  # set by whatever starts the worker: its end of the finish barrier's pipe
CONTRACT_VARS = (
    WORKER_INDEX_VAR, NUM_WORKERS_VAR, ROLE_VAR, JOB_ID_VAR, RESTART_COUNT_VAR, TASK_INDEX_VAR, MODE_VAR,
    CLUSTER_VAR, STRATEGY_FILE_VAR, CAPTURE_OUT_VAR, PROFILE_WARMUP_VAR, PROFILE_STEPS_VAR, SCRATCH_DIR_VAR,
    CAPTURE_ANSWER_FD_VAR, RELEASE_FD_VAR,
)

# The settings: one value for every task of a job, from the launcher's environment or its options.
SHARD_DATA_VAR = "ADRUN_SHARD_DATA"
MAX_STEPS_VAR = "ADRUN_MAX_STEPS"
INIT_TIMEOUT_VAR = "ADRUN_INIT_TIMEOUT"
OP_TIMEOUT_VAR = "ADRUN_OP_TIMEOUT"
ALLOW_UNTESTED_VERSIONS_VAR = "ADRUN_ALLOW_UNTESTED_VERSIONS"
SETTING_VARS = (SHARD_DATA_VAR, MAX_STEPS_VAR, INIT_TIMEOUT_VAR, OP_TIMEOUT_VAR, ALLOW_UNTESTED_VERSIONS_VAR)


def whole_number(env: Mapping[str, str], name: str, default: int, minimum: int, meaning: str) -> int:
    """`env[name]` as a whole number of at least `minimum`, `default` when unset or empty;
    `meaning` names what is expected ("a whole number of training steps")."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        raise UserError(f"{name}={text!r}: expected {meaning}, {minimum} or more")
    return int(text)


def choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    """`env[name]`, one of `allowed`; `default` when unset or empty."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if text not in allowed:
        raise UserError(f"{name}={text!r}: expected one of {', '.join(allowed)}")
    return text


def _seconds(env: Mapping[str, str], name: str) -> float:
    text = env.get(name, "").strip()
    if not text:
        return TASK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{name}={text!r}: expected a number of seconds, 0 or more")
    return value


@dataclass(frozen=True)
class Settings:
    """What every task of a job is told beyond who it is (README: "Settings read from the
    launcher's environment"); `adrun run`'s --shard-data and --max-steps set the first two."""

    shard_data: bool = False  # each worker reads a disjoint shard of the script's tf.data input
    max_steps: int | None = None  # every worker ends cleanly after this many training steps
    init_timeout_s: float = TASK_TIMEOUT_S  # how long a non-chief waits for the chief's init
    op_timeout_s: float = TASK_TIMEOUT_S  # bound of one session.run of a cluster worker (0: none)
    allow_untested_versions: bool = False  # TF2 mode runs on TF/Keras versions it was not tested with

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The settings `env` holds; a bad value is a UserError naming its variable."""
        steps = whole_number(env, MAX_STEPS_VAR, 0, 1, "a whole number of training steps")
        return cls(
            shard_data=choice(env, SHARD_DATA_VAR, "0", ("0", "1")) == "1",
            max_steps=steps or None,
            init_timeout_s=_seconds(env, INIT_TIMEOUT_VAR),
            op_timeout_s=_seconds(env, OP_TIMEOUT_VAR),
            allow_untested_versions=choice(env, ALLOW_UNTESTED_VERSIONS_VAR, "0", ("0", "1")) == "1",
        )

    def to_env(self) -> dict[str, str]:
        """The variables that say these settings (`from_env` reads them back equal); a default
        is left unset, as in a task started without adrun's settings."""
        env = {}
        if self.shard_data:
            env[SHARD_DATA_VAR] = "1"
        if self.max_steps is not None:
            env[MAX_STEPS_VAR] = str(self.max_steps)
        if self.allow_untested_versions:
            env[ALLOW_UNTESTED_VERSIONS_VAR] = "1"
        for name, seconds in ((INIT_TIMEOUT_VAR, self.init_timeout_s), (OP_TIMEOUT_VAR, self.op_timeout_s)):
            if seconds != TASK_TIMEOUT_S:
                env[name] = str(int(seconds)) if seconds.is_integer() else repr(seconds)
        return env
