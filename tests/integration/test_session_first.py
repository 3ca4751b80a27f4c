"""A script that creates its Session before its model (tests/scripts/session_first_model.py)
trains data-parallel: every worker's final variables equal synchronous SGD on the mean of the
workers' gradients, computed here in numpy from the chief's initial values and the batches each
worker read. Before adrun deferred the session's preparation to its first run after the
optimizer, capture refused such a script ("its graph has no training op").
"""

from __future__ import annotations

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.integration
SCRIPT = str(SCRIPTS / "session_first_model.py")
STEPS, LR, WORKERS = 3, 0.1, 2


def _data_parallel_sgd(runs: list) -> dict[str, np.ndarray]:
    """`mean((x @ w + b - y) ** 2)` trained by SGD on the workers' mean gradient, from the chief's start."""
    w, b = runs[0]["init/w"].astype(np.float64), runs[0]["init/b"].astype(np.float64)
    for step in range(STEPS):
        grads_w, grads_b = [], []
        for run in runs:
            x, y = run["x"][step].astype(np.float64), run["y"][step].astype(np.float64)
            residual = 2 * (x @ w + b - y) / y.size
            grads_w.append(x.T @ residual)
            grads_b.append(residual.sum(axis=0))
        w, b = w - LR * np.mean(grads_w, axis=0), b - LR * np.mean(grads_b, axis=0)
    return {"w": w, "b": b}


@pytest.mark.parametrize("strategy,inputs", [
    pytest.param("PSLoadBalancing", "dataset", marks=pytest.mark.full),
    ("AllReduce", "dataset"),  # the variables are replicas on the workers: evaluation graphs could alias them
    pytest.param("AllReduce", "feed", marks=pytest.mark.full),
])
def test_session_created_before_the_model_trains_data_parallel(tmp_path, spec_file, strategy, inputs):
    spec = spec_file(workers=WORKERS, ps=2 if strategy == "PSLoadBalancing" else 1)
    extra = ["--eval-graphs"] if inputs == "dataset" and strategy == "AllReduce" else []
    result = run_adrun("--spec", str(spec), "--strategy", strategy, SCRIPT, "--input", inputs,
                       "--steps", str(STEPS), "--lr", str(LR), "--out", str(tmp_path), *extra)
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    runs = [np.load(tmp_path / f"w{w}.npz") for w in range(WORKERS)]
    assert not np.array_equal(runs[0]["x"], runs[1]["x"])  # each worker read its own batches
    reference = _data_parallel_sgd(runs)
    assert not np.allclose(reference["w"], runs[0]["init/w"])  # training moved the variables
    for index, run in enumerate(runs):
        assert int(run["global_step"]) == STEPS, f"w{index}: global_step"
        for name, value in reference.items():
            np.testing.assert_allclose(run[f"final/{name}"], value, rtol=1e-5, atol=1e-6, err_msg=f"w{index}: {name}")
        for key in (k for k in run.files if k.startswith("eval-")):
            assert not run[key].any(), f"w{index}: {key} is not its own graph's zeros"
