"""How a running job fails, is interrupted, and cleans up; what every task gets and leaves behind.

Every test trains tests/scripts/tiny_model.py on 2 workers + 1 PS for a few steps, makes one thing
go wrong, and checks the exit code, the root-cause block, that adrun (not the tasks themselves)
ended the job, and that no process carrying the job's ADRUN_JOB_ID is left. No test times adrun on
this busy machine: the tasks would run for hours (or wait on a dead peer for ADRUN_OP_TIMEOUT,
600 s) unless adrun stops them, so the job ending at all, with the tasks marked as stopped by
adrun, is the event each waits for; GUARD_S only keeps a broken adrun from hanging the suite.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adrun.launch.env import HOOK_DIR
from adrun.launch.job.report import JobReport
from adrun.launch.job.teardown import leftover_processes
from adrun.launch.job.tf_noise import NoiseFilter
from tests.support.adrun_cli import AdrunResult, flat, run_adrun
from tests.support.live_jobs import GUARD_S, job_processes, wait_no_leftovers
from tests.support.paths import REPO, SCRIPTS, TINY

pytestmark = pytest.mark.integration


def root_cause(result: AdrunResult) -> str:
    text = flat(result.stderr)
    assert "root cause: " in text, result.output
    return text[text.index("root cause: "):]


def no_adrun_traceback(result: AdrunResult) -> bool:
    """No traceback but the tasks' own, which adrun shows prefixed `[tag]` or inside the root-cause box."""
    return all(line.startswith(("[w", "[ps", "│")) for line in result.output.splitlines() if "Traceback" in line)


# --- 10. a worker fails mid-training -------------------------------------------------------------


def test_worker_exception_is_root_cause_and_stops_the_job(spec_file):
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), TINY, "--steps", "6", "--fail-on", "1", "--fail-at", "2")
    assert result.returncode == 1, result.output
    assert no_adrun_traceback(result), result.output
    assert leftover_processes(result.job_id) == []
    cause = root_cause(result)
    assert cause.startswith("root cause: w1 failed task w1 (worker 1) host localhost exit code 1"), cause
    assert "RuntimeError: boom from w1" in cause
    assert "w1 (worker 1 on localhost) exited with code 1: stopping the other tasks" in result.stderr
    # w0 and ps0 did not finish on their own (w0 waits for w1's gradient, ps0 serves forever): adrun
    # stopped them, and the run ended long before w0's wait would have timed out.
    summary = flat(result.stderr)
    assert re.search(r"ps0 ps stopped .* w0 worker stopped .* w1 worker 1 ", summary), summary


# --- 10b. the root cause is the script's last words, not TensorFlow's start-up noise ----------------


NOISY = str(SCRIPTS / "noisy_failure.py")


def test_root_cause_is_the_traceback_and_tf_noise_is_folded(tmp_path, spec_file):
    logs = tmp_path / "logs"
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--log-dir", str(logs), NOISY, "--fail-on", "1", "--fail-at", "2")
    assert result.returncode == 1, result.output
    cause = root_cause(result)
    assert cause.endswith("ValueError: worker 1: batch 2 has no labels"), cause
    assert "last output lines: step 1 last stderr lines" in cause, cause
    for noise in ("cuInit", "oneDNN", "absl", "deprecated", "Instructions for updating"):
        assert noise not in cause, cause
    # The live view: one line per task counting its folded lines, which the log files keep.
    assert "oneDNN" not in result.stdout and "Instructions for updating" not in result.stdout
    for task in ("ps0", "w0", "w1"):
        folded = re.findall(rf"^\[{task}\] \((\d+) lines of TensorFlow start-up messages folded; --verbose shows "
                            r"them\)$", result.stderr, re.MULTILINE)
        noise = NoiseFilter()
        logged = sum(noise.is_noise(line) for line in (logs / f"{task}.log").read_text().splitlines())
        assert folded and sum(map(int, folded)) == logged >= 7, (task, folded, logged)
    report = JobReport.model_validate_json((logs / "result.json").read_text())
    assert report.root_cause_stderr[0] == "Traceback (most recent call last):"
    assert report.root_cause_stderr[-1] == "ValueError: worker 1: batch 2 has no labels"
    assert report.root_cause_stdout == ["step 1"]

    verbose = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--verbose", NOISY, "--fail-on", "1", "--fail-at", "1")
    assert verbose.returncode == 1, verbose.output
    assert re.search(r"^\[w1\] I0000 .* oneDNN custom operations are on", verbose.stdout, re.MULTILINE), verbose.stdout
    assert "start-up messages folded" not in verbose.output
    assert "oneDNN" not in root_cause(verbose)


def test_failure_during_capture_quotes_the_traceback_without_tf_noise():
    result = run_adrun("--strategy", "PSLoadBalancing", NOISY, "--fail-on", "0", "--fail-at", "0")
    assert result.returncode == 2, result.output
    lines = result.stderr.splitlines()
    start = lines.index(f"adrun: error: {NOISY}: failed before adrun captured its graph (exit code 1); "
                        "last lines of its stderr:")
    assert lines[start + 1] == "    Traceback (most recent call last):", result.stderr
    assert lines[-1] == "    ValueError: worker 0: no data to train on", result.stderr


# --- 11. a worker killed by SIGKILL ---------------------------------------------------------------


def test_worker_sigkill_is_reported_as_such(tmp_path, spec_file):
    result_json = tmp_path / "result.json"
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--quiet", "--result-json", str(result_json), TINY, "--steps", "4",
                       "--fail-on", "1", "--fail-at", "1", "--fail-how", "sigkill")
    assert result.returncode == 137, result.output
    assert "Traceback" not in result.output
    assert leftover_processes(result.job_id) == []
    cause = root_cause(result)
    assert cause.startswith("root cause: w1 failed task w1 (worker 1) host localhost exit killed by SIGKILL (status -9)"), cause
    assert "w1 (worker 1 on localhost) was killed by SIGKILL" in result.stderr
    # TensorFlow's start-up chatter is not what the user needs to see here.
    assert "oneDNN" not in cause and "absl::InitializeLog" not in cause, cause
    # The same, as data.
    report = JobReport.model_validate_json(result_json.read_text())
    assert (report.exit_code, report.succeeded) == (137, False)
    assert report.root_cause == "w1 (worker 1 on localhost) was killed by SIGKILL"
    tasks = {t.task: t for t in report.tasks}
    assert (tasks["w1"].signal, tasks["w1"].stopped_by_adrun) == ("SIGKILL", False)
    assert tasks["w0"].stopped_by_adrun and tasks["ps0"].stopped_by_adrun


# --- 12. a parameter server killed ----------------------------------------------------------------


def test_killed_parameter_server_fails_the_job(spec_file, live, tmp_path):
    result_json = tmp_path / "result.json"
    job = live("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--result-json", str(result_json), TINY, "--steps", "100000",
               "--step-sleep", "0.05")
    job.wait_for_line(r"^\[w1\] step 2$")
    [ps] = job_processes(job.job_id, "ps")
    assert ps.info["environ"]["ADRUN_TASK_INDEX"] == "0"
    ps.kill()
    code = job.wait(timeout_s=GUARD_S)  # the workers had hours of steps left
    assert code == 137, job.output
    assert leftover_processes(job.job_id) == []
    tasks = {t.task: t for t in JobReport.model_validate_json(result_json.read_text()).tasks}
    assert tasks["w0"].stopped_by_adrun and tasks["w1"].stopped_by_adrun, tasks
    text = flat(job.output)
    assert "root cause: ps0 failed task ps0 (ps 0) host localhost exit killed by SIGKILL" in text, job.output
    assert "Traceback" not in job.output.split("root cause")[1].split("last stderr lines")[0]


# --- 13. Ctrl-C -----------------------------------------------------------------------------------


def test_ctrl_c_stops_the_job_with_130(spec_file, live):
    job = live("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), TINY, "--steps", "100000", "--step-sleep", "0.05")
    job.wait_for_line(r"^\[w0\] step 2$")
    assert len(job_processes(job.job_id, "worker")) == 2
    job.proc.send_signal(signal.SIGINT)
    code = job.wait(timeout_s=GUARD_S)  # the workers had hours of steps left
    assert code == 130, job.output
    assert leftover_processes(job.job_id) == []
    assert "adrun: interrupted: stopping all tasks" in job.output
    assert "job interrupted" in job.output
    assert "root cause" not in job.output and "Traceback" not in job.output


def test_ctrl_c_during_capture_exits_130(tmp_path, live):
    marker = tmp_path / "capturing"
    job = live("--strategy", "PSLoadBalancing", str(SCRIPTS / "touch_and_sleep.py"), str(marker), "3600")
    deadline = time.monotonic() + GUARD_S
    while not marker.exists():
        assert time.monotonic() < deadline and job.proc.poll() is None, job.output
        time.sleep(0.1)
    job.proc.send_signal(signal.SIGINT)
    assert job.wait(timeout_s=GUARD_S) == 130, job.output  # the script had an hour of sleep left
    assert leftover_processes(job.job_id) == []  # the capture process went with it
    assert job.output.splitlines()[-1] == "adrun: interrupted"
    assert "Traceback" not in job.output and "Aborted" not in job.output


# --- 14. the launcher SIGKILLed ----------------------------------------------------------------------


def test_killed_launcher_takes_every_task_with_it(spec_file, live):
    job = live("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), TINY, "--steps", "100000", "--step-sleep", "0.05")
    job.wait_for_line(r"^\[w1\] step 2$")
    assert len(leftover_processes(job.job_id)) == 3  # ps0, w0, w1 (the launcher itself has no ADRUN_JOB_ID)
    job.proc.kill()
    job.wait(timeout_s=GUARD_S)
    wait_no_leftovers(job.job_id, GUARD_S)  # the tasks had hours of steps left: their parent's death ends them


# --- 15 + 17b. env contract, and a site's own sitecustomize still runs ---------------------------------

_SITECUSTOMIZE = """\
import os
os.environ["TEST_SITECUSTOMIZE_MARKER"] = f"chained in {os.getpid()}"
"""


def test_env_contract_and_chained_sitecustomize(tmp_path, spec_file):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), TINY, "--steps", "1", "--print-env", "--print-marker", "--print-pid",
                       env={"PYTHONPATH": str(site)})
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    for w in (0, 1):
        lines = [line[len(f"[w{w}] "):] for line in result.stdout.splitlines() if line.startswith(f"[w{w}] ")]
        assert [line for line in lines if line.startswith("env ")] == [
            f"env ADRUN_WORKER_INDEX={w}",
            "env ADRUN_NUM_WORKERS=2",
            "env ADRUN_ROLE=worker",
            f"env ADRUN_JOB_ID={result.job_id}",
        ], result.stdout
        # The site's sitecustomize ran in this very worker process (not only in the launcher,
        # whose environment the tasks inherit).
        [pid] = [line.split()[1] for line in lines if line.startswith("pid ")]
        assert f"marker chained in {pid}" in lines, lines
        assert "done" in lines


# --- 16. --log-dir and --quiet -------------------------------------------------------------------------


def test_log_dir_has_one_file_per_task_and_quiet_still_summarizes(tmp_path, spec_file):
    logs = tmp_path / "logs"
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--quiet", "--log-dir", str(logs), TINY, "--steps", "3",
                       "--print-env")
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    assert sorted(p.name for p in logs.iterdir()) == ["ps0.log", "result.json", "w0.log", "w1.log"]
    for w in (0, 1):
        log = (logs / f"w{w}.log").read_text()
        assert f"env ADRUN_WORKER_INDEX={w}\n" in log and "step 3\ndone\n" in log, log
        assert f"ADRUN_WORKER_INDEX={1 - w}" not in log
        assert "@@ADRUN" not in log
    assert "ps0 serving at localhost:" in (logs / "ps0.log").read_text()
    # --quiet: no task line on the terminal, but the summary is there, with the steps the
    # metric lines (kept out of the logs) reported.
    assert result.stdout == "", result.stdout
    assert "[w0]" not in result.stderr
    summary = flat(result.stderr)
    assert "job succeeded" in summary
    assert re.search(r"w0 worker 0 3 \S+ \S+ w1 worker 0 3 ", summary), summary
    # The log dir also holds the job's result as data.
    report = JobReport.model_validate_json((logs / "result.json").read_text())
    assert (report.job_id, report.exit_code, report.succeeded, report.builder) == (
        result.job_id, 0, True, "PSLoadBalancing")
    assert report.steps == 6 and report.root_cause is None
    assert [(t.task, t.exit_code, t.steps) for t in report.tasks if t.role == "worker"] == [("w0", 0, 3), ("w1", 0, 3)]
    assert [(t.task, t.stopped_by_adrun, t.steps) for t in report.tasks if t.role == "ps"] == [("ps0", True, None)]


# --- 17a. the hook is inert outside adrun --------------------------------------------------------------


def test_hook_is_inert_without_adrun_mode():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRUN_")}
    env["PYTHONPATH"] = str(HOOK_DIR)
    proc = subprocess.run([sys.executable, TINY, "--steps", "2", "--print-modules"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["step 1", "step 2", "done"], proc.stdout
    [sitecustomize] = [line.split(" ", 1)[1] for line in lines if line.startswith("sitecustomize ")]
    assert Path(sitecustomize) == HOOK_DIR / "sitecustomize.py"  # the hook was loaded ...
    assert "adrun-modules []" in lines, lines  # ... and did nothing: no runtime, no patches


# --- 18. the job succeeds only if every worker does ----------------------------------------------------


def test_worker_exit_code_after_training_is_the_job_exit_code(spec_file):
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--quiet", TINY, "--steps", "2", "--fail-on", "1",
                       "--fail-how", "exit3")
    assert result.returncode == 3, result.output
    assert "Traceback" not in result.output
    assert leftover_processes(result.job_id) == []
    assert root_cause(result).startswith("root cause: w1 failed task w1 (worker 1) host localhost exit code 3")
