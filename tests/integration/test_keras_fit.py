"""tf_keras `Model.fit` in graph mode trains synchronously under adrun (tests/scripts/keras_fit_model.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import REPO, SCRIPTS

pytestmark = pytest.mark.integration
SCRIPT = str(SCRIPTS / "keras_fit_model.py")
STEPS = 4


@pytest.mark.parametrize("strategy,optimizer,replicas", [
    pytest.param("PS", "sgd", 1, marks=pytest.mark.full),  # Keras on a PS: the batch-norm case below
    ("AllReduce", "adam", 1),
    # in-graph replicas: each batch of 8 split 3+3+2, the same result (replicas' oracle: test_replicas)
    pytest.param("AllReduce", "adam", 3, marks=pytest.mark.full),
])
def test_model_fit_equals_single_process_fit_on_the_combined_batches(tmp_path, spec_file, strategy, optimizer, replicas):
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1, replicas=replicas)), "--strategy", strategy,
                       SCRIPT, "--optimizer", optimizer, "--steps", str(STEPS), "--out", str(tmp_path))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    if replicas > 1:
        assert f"worker 1: {replicas} in-graph replicas" in result.output
    subprocess.run([sys.executable, SCRIPT, "--optimizer", optimizer, "--steps", str(STEPS), "--out", str(tmp_path),
                    "--reference", "2"], check=True, capture_output=True, cwd=REPO)
    reference = np.load(tmp_path / "reference.npz")
    for w in (0, 1):
        got = np.load(tmp_path / f"w{w}.npz")
        assert int(got["iterations"]) == STEPS
        for key in (k for k in reference.files if k.startswith("arr_")):
            np.testing.assert_allclose(got[key], reference[key], rtol=1e-5, atol=1e-6, err_msg=f"w{w} weight {key}")


@pytest.mark.parametrize("strategy", ["PS", pytest.param("AllReduce", marks=pytest.mark.full)])
def test_batchnorm_statistics_are_per_worker_and_match_single_process(tmp_path, spec_file, strategy):
    """Moving statistics (TF marks them ON_READ) stay on each worker: updated once per step from its
    own batch, never N times over on a shared copy. With identical data every worker's statistics
    and weights equal single-process training."""
    flags = ["--batchnorm", "--same-data", "--steps", str(STEPS), "--out", str(tmp_path)]
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--strategy", strategy, "--quiet", SCRIPT, *flags)
    assert result.returncode == 0, result.output
    subprocess.run([sys.executable, SCRIPT, *flags, "--reference", "1"], check=True, capture_output=True, cwd=REPO)
    reference = np.load(tmp_path / "reference.npz")
    for w in (0, 1):
        got = np.load(tmp_path / f"w{w}.npz")
        for key in (k for k in reference.files if k.startswith("arr_")):
            np.testing.assert_allclose(got[key], reference[key], rtol=1e-5, atol=1e-6, err_msg=f"w{w} {key} ({strategy})")
