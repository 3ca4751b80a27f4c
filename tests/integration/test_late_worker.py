"""A worker may start after the chief has ended (asynchronous PS, docs/testing.md).

Nothing an asynchronous worker runs involves the chief once the chief has initialized the shared
variables and given the start token, so such a worker must train on when the chief is gone. Before
the fix its Session's first run waited forever for the chief's gRPC server: the session's device
filters named the chief, and TensorFlow's master waits for every task the filters name to list its
devices, with no timeout.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import REPO, SCRIPTS

pytestmark = pytest.mark.integration
SCRIPT = str(SCRIPTS / "late_worker_model.py")
STEPS = 5


def test_a_worker_starting_after_the_chief_ended_trains_as_plain_python(tmp_path, spec_file):
    out, plain = tmp_path / "out", tmp_path / "plain"
    out.mkdir(), plain.mkdir()
    # a worker blocked before its first step fails the job instead of hanging it
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--strategy", "PS", "--strategy-opt", "sync=false",
                       "--stall-timeout", "120", "--on-stall", "fail", "--quiet",
                       SCRIPT, "--steps", str(STEPS), "--out", str(out))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    subprocess.run([sys.executable, SCRIPT, "--steps", str(STEPS), "--passes", "2", "--out", str(plain)],
                   check=True, capture_output=True, cwd=REPO)
    reference, chief, late = np.load(plain / "w0.npz"), np.load(out / "w0.npz"), np.load(out / "w1.npz")
    assert int(chief["global_step"]) == STEPS
    assert int(late["global_step"]) == 2 * STEPS == int(reference["global_step"])
    for name in ("w", "b"):
        np.testing.assert_allclose(late[name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name)
        assert not np.allclose(late[name], chief[name]), f"{name}: the late worker's pass moved nothing"
