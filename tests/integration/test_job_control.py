"""Job control from another terminal: `adrun jobs`, `adrun stop` and `adrun logs` on real local jobs.

Each `adrun` here is a separate process, as a user's second terminal would be; the record lives in
the test session's ADRUN_HOME (tests/conftest.py). The long job is tests/scripts/tiny_model.py on
2 workers + 1 PS; the jobs stopped before they train are held in their capture by
tests/scripts/touch_and_sleep.py, which imports no TensorFlow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.live_jobs import GUARD_S, LiveAdrun, wait_no_leftovers
from tests.support.paths import REPO, SCRIPTS, TINY

pytestmark = pytest.mark.integration


def recorded_jobs(*flags: str) -> dict[str, dict[str, Any]]:
    """`adrun jobs --json [flags]` by job id."""
    result = run_adrun("jobs", "--json", *flags)
    assert result.returncode == 0, result.output
    return {job["id"]: job for job in json.loads(result.stdout)}


def capturing(live, tmp_path: Path, *args: str) -> LiveAdrun:
    """A job held in its capture (the script sleeps there) once its script has started."""
    marker = tmp_path / "capturing"
    job = live(*args, str(SCRIPTS / "touch_and_sleep.py"), str(marker), "120")
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and job.proc.poll() is None, job.output
        time.sleep(0.1)
    return job


def test_stop_ends_a_running_job_and_logs_follow_it_to_the_end(tmp_path, spec_file, live):
    logs = tmp_path / "logs"
    job = live("--strategy", "PSLoadBalancing", "--spec", str(spec_file()), "--log-dir", str(logs), TINY, "--steps", "100000", "--step-sleep", "0.05")
    job.wait_for_line(r"^\[w1\] step 2$")

    running = recorded_jobs()[job.job_id]  # without --all: the running jobs
    assert running["state"] == "running", running
    assert (running["launcher_pid"], running["log_dir"], running["script"]) == (job.proc.pid, str(logs), TINY)
    assert running["command"] == f"adrun --job-id {job.job_id} --strategy PSLoadBalancing --spec {spec_file()} --log-dir {logs} {TINY} " \
                                 "--steps 100000 --step-sleep 0.05"
    assert (running["ended"], running["exit_code"], running["attempt"]) == (None, None, 0)
    table = run_adrun("jobs")
    assert job.job_id in table.stdout and "running" in table.stdout, table.output

    follower = subprocess.Popen([sys.executable, "-m", "adrun", "logs", "-f", job.job_id], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stopped = run_adrun("stop", job.job_id[:-3])  # a prefix that names one job is enough
        # `stop` returns once the launcher recorded the end, which it does after its teardown.
        assert leftover_processes(job.job_id) == []
        followed, follow_err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert stopped.returncode == 0, stopped.output
    assert stopped.stderr.strip() == f"adrun: job {job.job_id} stopped (its launcher exited with code 130)"
    assert job.wait(timeout_s=30) == 130, job.output
    assert "adrun: interrupted: stopping all tasks" in job.output and "job interrupted" in job.output
    ended = recorded_jobs("--all")[job.job_id]
    assert (ended["state"], ended["exit_code"]) == ("stopped", 130)
    assert job.job_id not in recorded_jobs()

    # `logs -f` ended with the job, having shown every line of every task's file once.
    assert follower.returncode == 0, follow_err
    shown = run_adrun("logs", job.job_id)
    assert shown.returncode == 0, shown.output
    assert sorted(followed.splitlines()) == sorted(shown.stdout.splitlines())
    expected = [f"[{tag}] {line}" for tag in ("w0", "w1", "ps0") for line in (logs / f"{tag}.log").read_text().splitlines()]
    assert shown.stdout.splitlines() == expected  # workers first, each file whole, prefixed as in the live view
    assert "[w1] step 2" in expected and any(line.startswith("[ps0] ps0 serving at localhost:") for line in expected)

    again = run_adrun("stop", job.job_id)
    assert again.returncode == 2
    assert again.stderr.startswith(f"adrun: error: job {job.job_id} is not running: it ended stopped at "), again.stderr


def test_stop_while_capturing_and_logs_without_log_dir(tmp_path, live):
    job = capturing(live, tmp_path)
    stopped = run_adrun("stop", job.job_id)
    assert stopped.returncode == 0, stopped.output
    assert f"job {job.job_id} stopped (its launcher exited with code 130)" in stopped.stderr
    assert job.wait(timeout_s=30) == 130, job.output
    assert leftover_processes(job.job_id) == []  # the capture process went with it
    assert job.output.splitlines()[-1] == "adrun: interrupted"
    assert recorded_jobs("--all")[job.job_id]["state"] == "stopped"
    logs = run_adrun("logs", job.job_id)
    assert logs.returncode == 2
    assert logs.stderr.strip() == (f"adrun: error: job {job.job_id} ran without --log-dir: its output went only to "
                                   "the terminal that started it (run with --log-dir DIR to keep one file per task)")


def test_a_killed_launcher_is_lost_and_stop_ends_what_is_left(tmp_path, live):
    job = capturing(live, tmp_path)
    assert recorded_jobs()[job.job_id]["state"] == "running"
    # A process of the job that is no child of the launcher (nothing else would end it).
    straggler = psutil.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**os.environ, "ADRUN_JOB_ID": job.job_id}, start_new_session=True)
    job.proc.kill()
    job.wait(timeout_s=10)
    # The capture process dies with its launcher; the straggler stays.
    deadline = time.monotonic() + GUARD_S
    while [p.pid for p in leftover_processes(job.job_id)] != [straggler.pid]:
        assert time.monotonic() < deadline, [p.info for p in leftover_processes(job.job_id)]
        time.sleep(0.1)

    lost = recorded_jobs("--all")[job.job_id]
    assert (lost["state"], lost["ended"], lost["exit_code"]) == ("lost", None, None)
    assert job.job_id not in recorded_jobs()
    result = run_adrun("stop", job.job_id)
    assert result.returncode == 1, result.output
    assert result.stderr.splitlines() == [
        f"adrun: error: job {job.job_id} is lost: its launcher (pid {job.proc.pid}) ended without recording how "
        "the job ended (killed with SIGKILL?)",
        f"adrun: ended 1 process(es) of the job left on this machine (pids {straggler.pid})",
    ]
    assert straggler.wait(timeout=10) == -9
    wait_no_leftovers(job.job_id, GUARD_S)


def test_unknown_job_ids():
    for command in ("stop", "logs"):
        result = run_adrun(command, "no-such-job")
        assert result.returncode == 2, result.output
        assert result.stderr == ("adrun: error: no job 'no-such-job' on this machine (`adrun jobs --all` lists the "
                                 "recorded ones)\n")
    bad = subprocess.run([sys.executable, "-m", "adrun", "--job-id", "../../x", TINY], cwd=REPO, capture_output=True,
                         text=True, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2
    assert bad.stderr == ("adrun: error: --job-id '../../x': use 1 to 64 letters, digits, '.', '_' or '-', starting "
                          "with a letter or digit\n")
