"""A first start under Auto starts the script once (adrun/capture_run.py, CaptureThenProfile): the
process that captured the graph waits while the launcher looks its plan up, then goes on into the
profile (no plan remembered) or is told to stop (a plan remembered). Counted by a wrapper that
appends each start's pid to a file, for a graph-mode and a TF2 script; an error or Ctrl-C in the
profile leaves no process behind."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import flat, run_adrun
from tests.support.live_jobs import wait_no_leftovers
from tests.support.paths import SCRIPTS, TINY

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

COUNT = str(SCRIPTS / "count_starts.py")
SCRIPTS_BY_KIND = {
    "graph": [TINY, "--steps", "30"],
    "tf2": [str(SCRIPTS / "tf2_profile_model.py"), "--steps", "40"],
}


def starts(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


@pytest.mark.parametrize("kind", sorted(SCRIPTS_BY_KIND))
def test_a_first_start_runs_the_script_once_and_a_repeated_start_once(tmp_path, spec_file, kind):
    marker, spec = tmp_path / "starts", str(spec_file(workers=2, ps=1))
    first = run_adrun("--spec", spec, "--dry-run", COUNT, str(marker), *SCRIPTS_BY_KIND[kind])
    assert first.returncode == 0, first.output
    assert "profiling" in first.stderr and "the plan made earlier" not in first.stderr
    assert starts(marker) == 1  # captured and profiled by one process
    assert leftover_processes(first.job_id) == []

    again = run_adrun("--spec", spec, "--dry-run", COUNT, str(marker), *SCRIPTS_BY_KIND[kind])
    assert again.returncode == 0, again.output
    assert "Auto: the plan made earlier for this graph on this cluster" in flat(again.stderr)
    assert "profiling" not in again.stderr
    assert starts(marker) == 2  # captured, then told to stop
    assert leftover_processes(again.job_id) == []


def test_a_script_failing_in_the_profile_is_reported_and_leaves_nothing(tmp_path, spec_file):
    """tiny_model.py's worker 0 raises at its 6th step: after the capture point (its Session)."""
    marker = tmp_path / "starts"
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--dry-run", COUNT, str(marker), TINY,
                       "--steps", "30", "--fail-on", "0", "--fail-at", "5")
    assert result.returncode == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("adrun: error: ")]
    assert len(errors) == 1 and "failed while adrun profiled it (exit code 1)" in errors[0], result.output
    assert "RuntimeError: boom from w0" in result.stderr  # its own last lines are quoted
    assert starts(marker) == 1
    assert leftover_processes(result.job_id) == []


def test_ctrl_c_in_the_profile_ends_the_start_and_its_process(tmp_path, spec_file, live):
    marker = tmp_path / "starts"
    job = live("--spec", str(spec_file(workers=2, ps=1)), "--dry-run", COUNT, str(marker), TINY,
               "--steps", "100000", "--step-sleep", "5")  # a profile of minutes
    job.wait_for_line("profiling")
    assert starts(marker) == 1 and leftover_processes(job.job_id) != []  # the one process, profiling
    job.proc.send_signal(signal.SIGINT)
    assert job.wait(60) == 130, job.output
    assert job.lines[-1] == "adrun: interrupted" and "Traceback" not in job.output
    wait_no_leftovers(job.job_id, 30)
