"""Bounded staleness and asynchronous PS updates (docs/testing.md), measured by per-worker step
counters that the workers read after every step, not by timing. Worker 1 is slowed down, so
without a bound the others run far ahead."""

from __future__ import annotations

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.integration
STEPS = 12


def _max_leads(tmp_path, spec_file, option: str) -> list[int]:
    out = tmp_path / option.replace("=", "-")
    out.mkdir()
    result = run_adrun("--spec", str(spec_file(workers=3, ps=1)), "--strategy", "PS", "--strategy-opt", option,
                       "--quiet", str(SCRIPTS / "staleness_model.py"), "--steps", str(STEPS), "--out", str(out))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    runs = [np.load(out / f"w{w}.npz") for w in range(3)]
    for run in runs:
        assert run["losses"][-1] < run["losses"][0] / 2, "training must still make progress"
    return [int(run["leads"].max()) for run in runs]


def test_bounded_staleness_holds(tmp_path, spec_file):
    bounded = _max_leads(tmp_path, spec_file, "staleness=2")
    assert max(bounded) <= 2, f"a worker ran more than 2 steps ahead: {bounded}"


def test_async_is_unbounded(tmp_path, spec_file):
    unbounded = _max_leads(tmp_path, spec_file, "sync=false")
    assert max(unbounded) > 2, f"asynchronous workers should outrun the slow one: {unbounded}"


def test_a_step_blocked_on_a_wedged_peer_times_out_instead_of_hanging(tmp_path, spec_file):
    """ADRUN_OP_TIMEOUT bounds every worker session.run: worker 1 sleeps 3 s between steps, so the
    chief's synchronous step waits on it longer than the 1 s allowed and must fail, not hang."""
    out = tmp_path / "timeout"
    out.mkdir()
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--strategy", "PS", "--quiet",
                       str(SCRIPTS / "staleness_model.py"), "--steps", "3", "--slow", "3", "--out", str(out),
                       env={"ADRUN_OP_TIMEOUT": "1"}, timeout=120)
    assert result.returncode != 0, result.output
    assert "DeadlineExceededError" in result.output
    assert leftover_processes(result.job_id) == []
