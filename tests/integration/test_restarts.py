"""Restarts and stalls of real TensorFlow jobs (2 workers + 1 PS on this machine).

tests/scripts/restart_model.py trains a MonitoredTrainingSession with checkpoints every 5 steps on
batches that are a function of global_step, so a job that was killed and resumed must end at the
variables of an uninterrupted plain run. Nothing is timed: the script pauses at a known step and
says so with a file; the test waits for that file, then kills a process of the job found by its
ADRUN_JOB_ID (psutil).
"""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from adrun.launch.job.report import JobReport
from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import flat, run_adrun
from tests.support.live_jobs import job_process
from tests.support.paths import TINY
from tests.support.restart_oracle import MODEL, PAUSE_AT, STEPS, assert_ends_as_an_uninterrupted_run

pytestmark = pytest.mark.integration

def _kill_and_resume(tmp_path: Path, spec_file, live, role: str, index: int, pause_on: int, *options: str) -> None:
    """Pause worker `pause_on` at step PAUSE_AT in attempt 0, SIGKILL task (role, index), and check
    that the job resumes from its checkpoint, ends as the plain run, and left nothing of attempt 0.
    `options`: extra arguments of the run (before the script)."""
    out, result_json = tmp_path / "adrun", tmp_path / "result.json"
    out.mkdir()
    job = live("--strategy", "PSLoadBalancing", *options, "--spec", str(spec_file()), "--max-restarts", "1",
               "--restart-backoff", "0", "--result-json", str(result_json), MODEL, "--checkpoint-dir", str(out / "ckpt"), "--out", str(out),
               "--steps", str(STEPS), "--pause-on", str(pause_on), "--pause-at", str(PAUSE_AT))
    job.wait_for_file(out / "paused")
    first = leftover_processes(job.job_id)
    assert {p.info["environ"]["ADRUN_RESTART_COUNT"] for p in first} == {"0"} and len(first) == 3
    job_process(job.job_id, role, index).kill()
    job.wait_for_line(r"^\[w0\] attempt 1 starts at global step")
    # attempt 1 runs: nothing of attempt 0 is left
    assert not [p for p in first if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert job.wait(timeout_s=300) == 0, job.output
    assert leftover_processes(job.job_id) == []

    # It resumed from the last checkpoint before the pause, not from scratch ...
    for w in (0, 1):
        assert f"[w{w}] attempt 1 starts at global step 10" in job.output.splitlines(), job.output
    # ... and ended where an uninterrupted run ends.
    assert_ends_as_an_uninterrupted_run(out, tmp_path)

    cause = f"{'w' if role == 'worker' else 'ps'}{index} ({role} {index} on localhost) was killed by SIGKILL"
    report = JobReport.model_validate_json(result_json.read_text())
    assert (report.exit_code, report.succeeded, report.root_cause) == (0, True, None)
    assert [(a.attempt, a.exit_code, a.root_cause, a.restarted, a.verdict) for a in report.attempts] == [
        (0, 137, cause, True, "restarted: killed by SIGKILL"), (1, 0, None, False, None)]
    # the steps attempt 0 ran, as far as its workers reported them before the kill (at most 0.5 s late)
    lost = report.attempts[0].steps
    assert 0 < lost <= 2 * PAUSE_AT
    assert (f"adrun: attempt 0 ran {lost} steps (summed over the workers); restarted: killed by SIGKILL; "
            "starting attempt 1 in 0 s") in job.output
    assert "job succeeded" in job.output
    assert re.search(r"^attempts +$", job.output, re.MULTILINE), job.output  # the summary's attempts table


def test_a_killed_worker_is_restarted_from_the_checkpoint_and_ends_as_an_uninterrupted_run(tmp_path, spec_file, live):
    _kill_and_resume(tmp_path, spec_file, live, "worker", 1, pause_on=1)


@pytest.mark.full
def test_a_restarted_worker_reads_the_restored_chunks_not_its_old_cache(tmp_path, spec_file, live):
    # dense/w [4, 3] in 3 chunks on the PS, cached on the workers (runtime/kernels/ps_prefetch.py)
    _kill_and_resume(tmp_path, spec_file, live, "worker", 1, 1, "--strategy-opt", "chunk_bytes=16")


@pytest.mark.full
def test_a_killed_parameter_server_is_restarted_from_the_checkpoint_and_ends_as_an_uninterrupted_run(
        tmp_path, spec_file, live):
    _kill_and_resume(tmp_path, spec_file, live, "ps", 0, pause_on=0)


@pytest.mark.full  # the fast suite has the rule and the loop around real jobs (tests/unit/launch/job/test_restarts.py)
@pytest.mark.parametrize("fault,exit_code,verdict", [
    (["--extra-var-on", "1"], 65, "the script built a different graph than the one planned; it would again"),
    (["--fail-on", "1", "--fail-at", "1"], 1,
     "the script raised RuntimeError: an error in the script or its input, which a restart would repeat"),
])
def test_errors_of_the_script_are_not_restarted(tmp_path, spec_file, fault, exit_code, verdict):
    result_json = tmp_path / "result.json"
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--max-restarts", "3", "--restart-backoff", "0",
                       "--result-json", str(result_json), TINY, "--steps", "3", *fault)
    assert result.returncode == exit_code, result.output
    assert leftover_processes(result.job_id) == []
    assert f"adrun: attempt 0: not restarted: {verdict}" in flat(result.stderr)
    assert len(re.findall(r"^adrun: job ", result.stderr, re.MULTILINE)) == 1  # started once
    report = JobReport.model_validate_json(result_json.read_text())
    assert [(a.attempt, a.exit_code, a.restarted, a.verdict) for a in report.attempts] == [
        (0, exit_code, False, f"not restarted: {verdict}")]


def test_a_worker_that_hangs_fails_the_job_by_name_with_on_stall_fail(tmp_path, spec_file, live):
    out, result_json = tmp_path / "adrun", tmp_path / "result.json"
    out.mkdir()
    job = live("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--on-stall", "fail", "--stall-timeout", "8", "--result-json",
               str(result_json), MODEL, "--checkpoint-dir", str(out / "ckpt"), "--out", str(out), "--steps", "1000",
               "--pause-on", "1", "--pause-at", "3")
    job.wait_for_file(out / "paused")
    assert job.wait(timeout_s=120) == 124, job.output
    assert leftover_processes(job.job_id) == []
    text = flat(job.output)
    assert re.search(r"w1 \(worker 1 on localhost\) has made no training progress for \d+ s \(still at step 3, outside "
                     r"any training step\); other workers: w0 at step 3, waiting in step 4 for \d+ s; its script is "
                     r"busy or hung outside TensorFlow, and the others wait for it", text), text
    assert "root cause: w1 failed" in text and "exit none: it stalled, and adrun stopped the job (--on-stall fail)" in text
    report = JobReport.model_validate_json(result_json.read_text())
    assert report.exit_code == 124 and report.root_cause.startswith(
        "w1 (worker 1 on localhost) has made no training progress for ")
