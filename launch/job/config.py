"""One job's configuration: what the CLI decided, handed unchanged to the restart loop, each
attempt and its supervisor (as torchrun's `LaunchConfig` is), so an option is added in one place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from adrun.defaults import RESTART_BACKOFF_S, STALL_TIMEOUT_S
from adrun.env_vars import Settings
from adrun.spec import ClusterSpec

from .teardown import GRACE_S


@dataclass(frozen=True)
class JobConfig:
    job_id: str
    spec: ClusterSpec
    script: Path
    script_args: list[str]
    strategy_file: Path
    quiet: bool = False  # task lines are not shown (tails, logs and metrics are still kept)
    log_dir: Path | None = None  # one `<label>.log` per task, every line of both streams
    stall_timeout_s: float | None = STALL_TIMEOUT_S  # None: no stall is ever reported
    show_tf_noise: bool = False  # TensorFlow's start-up messages shown, not folded; every worker's progress bars
    on_stall: Literal["warn", "fail"] = "warn"
    max_restarts: int = 0
    restart_backoff_s: float = RESTART_BACKOFF_S
    settings: Settings | None = None  # what every task is told (None: the launcher environment's ADRUN_* settings)
    grace_s: float = GRACE_S  # between SIGTERM and SIGKILL when the job's tasks are stopped
    allow_exposed: bool = False  # True: leave the TF ports open to every host, install no rule, warn of nothing
