"""A 2017-style queue-fed LSTM language model (tests/scripts/ptb_lstm_model.py: graph seed,
Supervisor, three models sharing variables, dropout, clipped SGD with duplicate embedding rows, an
assigned learning rate, LSTM state fed through non-placeholder tensors) trains under adrun to its
plain run's variables with the same data on every worker (docs/architecture.md, "Sparse rows"):

- bit for bit with one worker (it applies its own gradient, as the plain run does), and with two
  workers when the optimizer sums a batch's duplicate rows itself (momentum): each worker sums them
  in TF's own order before they cross, and x + x then a division by 2 do not round;
- with two workers and plain SGD, to float tolerance: plain SGD adds every occurrence of a row in
  turn, while adrun sends one sum per distinct row (the bytes a step sends are the reason), and the
  two round differently in the last bits.
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
SCRIPT = str(SCRIPTS / "ptb_lstm_model.py")
STEPS = 12  # 2 epochs of 6 batches


_PLAIN: dict[str, dict[str, np.ndarray]] = {}


def plain_run(optimizer: str, tmp_path_factory) -> dict[str, np.ndarray]:
    if optimizer not in _PLAIN:
        out = tmp_path_factory.mktemp(f"plain-{optimizer}")
        subprocess.run([sys.executable, SCRIPT, "--optimizer", optimizer, "--out", str(out)],
                       check=True, capture_output=True, cwd=REPO)
        values = dict(np.load(out / "plain.npz"))
        # the oracle must be able to fail: training moved every trained variable
        moved = [k for k in values if k.startswith("final/") and not np.array_equal(values[k], values["init/" + k[6:]])]
        assert len(moved) == len([k for k in values if k.startswith("final/")])
        _PLAIN[optimizer] = values
    return _PLAIN[optimizer]


@pytest.mark.parametrize("workers, strategy, optimizer, exact", [
    pytest.param(1, "PSLoadBalancing", "sgd", True, marks=pytest.mark.full),
    (2, "AllReduce", "momentum", True),
    pytest.param(2, "PSLoadBalancing", "sgd", False, marks=pytest.mark.full),
    pytest.param(2, "PS", "momentum", True, marks=pytest.mark.full),
    pytest.param(2, "PSLoadBalancing", "momentum", True, marks=pytest.mark.full),
    pytest.param(2, "Parallax", "momentum", True, marks=pytest.mark.full),
    pytest.param(2, "PartitionedPS", "momentum", True, marks=pytest.mark.full),
])
def test_trains_to_the_plain_runs_values(tmp_path, tmp_path_factory, spec_file, workers, strategy, optimizer, exact):
    plain = plain_run(optimizer, tmp_path_factory)
    ps = 2 if strategy in ("PartitionedPS", "Parallax") or (workers, strategy) == (2, "PSLoadBalancing") else 1
    result = run_adrun("--spec", str(spec_file(workers=workers, ps=ps)), "--strategy", strategy,
                       SCRIPT, "--optimizer", optimizer, "--out", str(tmp_path))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    for w in range(workers):
        got = np.load(tmp_path / f"w{w}.npz")
        assert int(got["global_step"]) == STEPS, f"w{w}: global_step"
        assert float(got["lr"]) == 0.5, f"w{w}: the learning rate assigned for the second epoch"
        for key, value in plain.items():
            message = f"w{w}: {key} ({strategy}, {workers} workers, {optimizer})"
            if exact:
                np.testing.assert_array_equal(got[key], value, err_msg=message)
            else:
                np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=message)
