"""A JobResult's state, and the JobReport it is written out as (what --result-json holds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.launch.job.metrics import Throughput
from adrun.launch.job.report import JobReport, job_report, write_report
from adrun.exit_codes import INTERRUPTED_EXIT_CODE
from adrun.launch.job.failures import Failure, TaskExited
from adrun.launch.job.results import JobResult, TaskOutcome
from adrun.launch.job.tasks import Task
from adrun.task_events import StepEvent

W0, PS0 = Task("worker", 0, "10.0.0.1", 2000), Task("ps", 0, "10.0.0.2", 2001)


def result(exit_code: int, failed: Failure | None = None, interrupted: bool = False) -> JobResult:
    metrics = Throughput()
    for step, when in ((1, 10.0), (41, 12.0)):
        metrics.record(0, StepEvent(step, when, examples=32))
    outcomes = [TaskOutcome(W0, 11, exit_code if failed else 0, False), TaskOutcome(PS0, 12, -15, True)]
    return JobResult(exit_code, failed, interrupted, metrics, outcomes, 3.5, traffic={"10.0.0.1": (100, 200)})


@pytest.mark.parametrize("job, state, succeeded", [
    (result(0), "succeeded", True),
    (result(3, Failure(W0, TaskExited(3), ["ValueError: bad"])), "failed", False),
    (result(INTERRUPTED_EXIT_CODE, interrupted=True), "interrupted", False),
])
def test_the_report_is_the_result_written_out(job: JobResult, state: str, succeeded: bool, tmp_path: Path):
    assert job.state == state
    path = tmp_path / "out" / "result.json"
    write_report(job_report(job, "j1", "PS", tmp_path / "s.yml"), path)
    report = JobReport.model_validate_json(path.read_text())

    assert (report.exit_code, report.succeeded, report.interrupted) == (job.exit_code, succeeded, state == "interrupted")
    assert report.root_cause == (job.failed.summary if job.failed else None)
    assert (report.root_cause_kind, report.root_cause_exception) == (("exited" if job.failed else None), None)
    assert report.root_cause_stderr == (["ValueError: bad"] if job.failed else [])
    worker, ps = report.tasks
    assert (worker.task, worker.steps, worker.steps_per_s, worker.examples_per_s) == ("w0", 41, 20.0, 640.0)
    assert (ps.task, ps.signal, ps.stopped_by_adrun, ps.steps) == ("ps0", "SIGTERM", True, None)
    assert report.network["10.0.0.1"].sent_bytes == 100 and report.network["10.0.0.1"].received_bytes == 200
