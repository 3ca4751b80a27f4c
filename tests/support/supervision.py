"""Supervising hand-made jobs of `python -c` tasks: a task under the env contract, and a listener
that remembers what the supervisor and the restart loop told it."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from adrun.launch.env import run_context, task_env
from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.tasks import Task

# a task that runs until the supervisor stops it (a PS serves until then)
SLEEP = "import time; time.sleep(600)"


def python_task(task: Task, job_id: str, code: str, run_dir: Path, cluster: dict[str, list[str]],
                num_workers: int) -> TaskLaunch:
    """`task` running `python -c code` under the env contract, run in `run_dir` (also the hook
    directory); ADRUN_MODE is left out so a real sitecustomize on the path stays inert."""
    context = run_context(task, job_id, num_workers, cluster, strategy_file=None)
    env = task_env(context, os.environ, hook_dir=str(run_dir))
    env.pop("ADRUN_MODE")
    return TaskLaunch(task, [sys.executable, "-c", textwrap.dedent(code)], env, run_dir)


class Recorder:
    """A JobListener and AttemptListener that remembers what it was told, in order."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.lines: list[tuple[str, str, str]] = []
        self.stops: list[str] = []
        self.folds: list[tuple[str, int]] = []
        self.events: list[tuple[str, str]] = []  # ("line" | "folded", task tag), in order
        self.warnings: list[str] = []
        self.started: list[int] = []  # attempt numbers
        self.ended: list[tuple[int, float | None]] = []  # (attempt number, back-off before the next)

    def job_started(self, job_id, tasks):
        self.tasks = list(tasks)

    def task_output(self, task, stream, line):
        self.lines.append((task.tag, stream, line))
        self.events.append(("line", task.tag))

    def noise_folded(self, task, count):
        self.folds.append((task.tag, count))
        self.events.append(("folded", task.tag))

    def progress(self, throughput, elapsed_s):
        pass

    def stopping(self, reason):
        self.stops.append(reason)

    def warning(self, message):
        self.warnings.append(message)

    def attempt_started(self, number, max_restarts):
        self.started.append(number)

    def attempt_ended(self, attempt, next_in_s):
        self.ended.append((attempt.number, next_in_s))
