"""A TF2 job whose workers run different numbers of optimizer steps fails, naming the worker that
left, with no hang and nothing left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun, write_spec
from tests.support.tf2_oracle import SCRIPT

pytestmark = pytest.mark.timeout(300)


def test_unequal_step_counts_fail_naming_the_worker(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "cluster.yml", workers=2, ps=1)
    result = run_adrun("--spec", str(spec), "--quiet", "--strategy", "AllReduce", SCRIPT, "--kind", "fit-sequential", "--out",
                       str(tmp_path / "out"), "--worker1-epochs", "1")
    assert result.returncode == 1, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "root cause: w0 failed" in text, result.output
    assert "adrun: error: worker 0: a collective with worker 1 failed: that worker ended" in text, result.output
    assert leftover_processes(result.job_id) == []


def test_a_stuck_peer_fails_the_step_after_the_op_timeout(tmp_path: Path) -> None:
    """Worker 1 stops after its first batch (for up to 120 s): worker 0's next step waits in its
    collectives, and ADRUN_OP_TIMEOUT ends it (adrun/runtime/tf2/step_deadline.py; the collectives
    themselves carry no timeout)."""
    spec = write_spec(tmp_path / "cluster.yml", workers=2, ps=1)
    result = run_adrun("--spec", str(spec), "--quiet", "--strategy", "AllReduce", SCRIPT, "--kind", "fit-sequential", "--out",
                       str(tmp_path / "out"), "--wait-for-w0", env={"ADRUN_OP_TIMEOUT": "3"})
    assert result.returncode == 1, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "root cause: w0 failed" in text, result.output
    assert "a training step's collectives ran longer than ADRUN_OP_TIMEOUT (3 s)" in text, result.output
    assert "adrun: error: worker 0: a collective with another worker timed out" in text, result.output
    assert leftover_processes(result.job_id) == []
