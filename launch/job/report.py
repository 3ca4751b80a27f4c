"""A finished job as a JSON document: what `--result-json` and `<log-dir>/result.json` hold.

The supervisor's `JobResult` is the in-process record; this is its stable, versioned form for
programs (benchmarks, trial records, scripts around adrun), so that nothing has to read the
terminal table. Rates are those of the summary: each worker's steps per second from its first
metric report on (start-up excluded), summed over the workers for the cluster. A job that was
restarted reports its last attempt in the top-level fields and every attempt in `attempts` (added
to version 1: readers of the first version ignore it, every field they knew means what it meant).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from adrun.errors import UserError
from adrun.job_state import JobState
from adrun.task_context import Role

from .failures import FailureKind, TaskRaised
from .results import JobResult


class TaskReport(BaseModel):
    task: str  # `w0`, `ps1`
    role: Role
    index: int
    host: str
    exit_code: int | None  # None: the task could not be reaped
    signal: str | None  # e.g. "SIGKILL" when a signal ended it
    stopped_by_adrun: bool  # PS tasks after success; every task after a failure or interrupt
    steps: int | None = None  # workers: training steps run
    steps_per_s: float | None = None
    examples_per_s: float | None = None
    examples_per_step: int | None = None
    allreduce_bytes_per_step: int | None = None  # bytes handed to dense all-reduces per step


class AttemptReport(BaseModel):
    attempt: int  # ADRUN_RESTART_COUNT of its processes, 0 for the first
    exit_code: int
    root_cause: str | None  # the failing task's one-line summary; None when it did not fail
    root_cause_kind: FailureKind | None = None  # how it failed (added within version 1)
    root_cause_stderr: list[str] = []
    steps: int  # steps its workers ran, summed over the workers (how many a restart redid is the script's)
    elapsed_s: float
    restarted: bool
    verdict: str | None  # why it was (or was not) restarted


class NodeTraffic(BaseModel):
    sent_bytes: int
    received_bytes: int


class JobReport(BaseModel):
    version: Literal[1] = 1
    job_id: str
    builder: str  # the strategy's builder (or the document's, for --strategy FILE)
    strategy_file: str
    exit_code: int
    succeeded: bool
    interrupted: bool
    root_cause: str | None  # the failing task's one-line summary
    # how it failed: exited, raised (an exception it did not catch), refused (by adrun's hook),
    # killed (a signal), stalled, lost (its node); added within version 1
    root_cause_kind: FailureKind | None = None
    root_cause_exception: str | None = None  # the class of the exception it raised, when it did
    root_cause_stderr: list[str] = []  # its last stderr lines, TensorFlow's start-up noise left out
    root_cause_stdout: list[str] = []  # its last lines on stdout
    elapsed_s: float  # all attempts, back-off included
    steps: int  # summed over the workers
    steps_per_s: float | None
    examples_per_s: float | None
    tasks: list[TaskReport]
    network: dict[str, NodeTraffic] = {}  # per node: all its interfaces but loopback, during the run
    attempts: list[AttemptReport] = []  # every attempt in order, the last one included


def job_report(result: JobResult, job_id: str, builder: str, strategy_file: Path) -> JobReport:
    rates = result.metrics.workers
    tasks = []
    for outcome in result.outcomes:
        task = outcome.task
        rate = rates.get(task.index) if task.role == "worker" else None
        tasks.append(TaskReport(
            task=task.tag, role=task.role, index=task.index, host=task.host, exit_code=outcome.returncode,
            signal=outcome.signal_name, stopped_by_adrun=outcome.stopped,
            steps=rate.steps if rate else None,
            steps_per_s=rate.steps_per_s if rate else None,
            examples_per_s=rate.examples_per_s if rate else None,
            examples_per_step=rate.examples if rate else None,
            allreduce_bytes_per_step=rate.wire_bytes if rate else None,
        ))
    return JobReport(
        job_id=job_id, builder=builder, strategy_file=str(strategy_file), exit_code=result.exit_code,
        succeeded=result.state == JobState.SUCCEEDED, interrupted=result.interrupted,
        root_cause=result.failed.summary if result.failed else None,
        root_cause_kind=result.failed.cause.kind if result.failed else None,
        root_cause_exception=result.failed.cause.error.exception
        if result.failed and isinstance(result.failed.cause, TaskRaised) else None,
        root_cause_stderr=list(result.failed.stderr_tail) if result.failed else [],
        root_cause_stdout=list(result.failed.stdout_tail) if result.failed else [],
        elapsed_s=result.elapsed_s, steps=sum(r.steps for r in rates.values()),
        steps_per_s=result.metrics.steps_per_s, examples_per_s=result.metrics.examples_per_s,
        tasks=tasks,
        network={node: NodeTraffic(sent_bytes=sent, received_bytes=received)
                 for node, (sent, received) in result.traffic.items()},
        attempts=[AttemptReport(
            attempt=a.number, exit_code=a.exit_code, root_cause=a.failed.summary if a.failed else None,
            root_cause_kind=a.failed.cause.kind if a.failed else None,
            root_cause_stderr=list(a.failed.stderr_tail) if a.failed else [], steps=a.steps,
            elapsed_s=a.elapsed_s, restarted=a.restarted, verdict=a.verdict,
        ) for a in result.attempts],
    )


def write_report(report: JobReport, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.model_dump_json(indent=2) + "\n")
    except OSError as e:
        raise UserError(f"cannot write the job result to {path}: {e.strerror or e}") from None
