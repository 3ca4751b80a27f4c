"""Equivalence and averaging oracles (docs/testing.md) on a local multi-process cluster.

Each test trains tests/scripts/oracle_model.py under adrun, then computes in a separate plain
process what synchronous data-parallel SGD must give from the same initial values, averaging the
per-worker gradients independently in numpy, starting from the chief's initial values. Every
worker's final variables must match it (so every replica also started from the chief's values,
unseeded initializers notwithstanding), and global_step must equal the number of steps.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from adrun.launch.teardown import leftover_processes
from tests.conftest import REPO, SCRIPTS, run_adrun

pytestmark = pytest.mark.integration
STEPS = 3
NUM_WORKERS = 2


TWO_PS = {"PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "Parallax"}
BUILDERS = ["PS", "PSLoadBalancing", "AllReduce", "PartitionedPS", "UnevenPartitionedPS", "Parallax",
            "PartitionedAR", "RandomAxisPartitionAR"]


def _train_and_compare(tmp_path, spec_file, strategy: str, model: str, data: str, *options: str,
                       optimizer: str = "sgd") -> None:
    out = tmp_path / "out"
    spec = spec_file(workers=NUM_WORKERS, ps=2 if strategy in TWO_PS else 1)
    opts = [arg for option in options for arg in ("--strategy-opt", option)]
    result = run_adrun("--spec", str(spec), "--strategy", strategy, *opts, "--quiet",
                       str(SCRIPTS / "oracle_model.py"), "--model", model, "--data", data,
                       "--optimizer", optimizer, "--steps", str(STEPS), "--out", str(out))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    subprocess.run([sys.executable, str(SCRIPTS / "oracle_model.py"), "--model", model, "--data", data,
                    "--optimizer", optimizer, "--steps", str(STEPS), "--out", str(out), "--reference", str(NUM_WORKERS),
                    "--init-from", str(out / "w0.npz")], check=True, capture_output=True, cwd=REPO)
    reference = np.load(out / "reference.npz")
    chief = np.load(out / "w0.npz")
    for w in range(NUM_WORKERS):
        got = np.load(out / f"w{w}.npz")
        assert int(got["global_step"]) == STEPS, f"w{w}: global_step"
        for key in reference.files:
            if key.startswith("final/"):
                name = key[len("final/"):]
                np.testing.assert_allclose(got[key], reference[key], rtol=1e-5, atol=1e-6,
                                           err_msg=f"w{w}: {name} after {STEPS} steps ({strategy}, {model}, {data})")
    # the oracle must be able to fail: training moved the variables
    assert any(not np.allclose(chief[k.replace("final/", "init/")], reference[k]) for k in reference.files if k.startswith("final/"))


@pytest.mark.parametrize("strategy", ["PS", "PSLoadBalancing", "AllReduce"])
@pytest.mark.parametrize("model", ["dense", "sparse"])
def test_averaging_per_worker_data(tmp_path, spec_file, strategy, model):
    _train_and_compare(tmp_path, spec_file, strategy, model, "per-worker")


@pytest.mark.parametrize("strategy,model,options", [
    ("PartitionedPS", "sparse", ()),
    ("UnevenPartitionedPS", "dense", ()),
    ("Parallax", "sparse", ()),
    ("PartitionedAR", "sparse", ()),
    ("RandomAxisPartitionAR", "dense", ()),  # w [4, 3] is cut on axis 1 with seed 0
    ("PS", "sparse", ("local_proxy=true",)),
])
def test_averaging_strategy_library(tmp_path, spec_file, strategy, model, options):
    _train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", *options)


@pytest.mark.parametrize("strategy,model,optimizer", [
    ("PS", "sparse", "adam"),
    ("Parallax", "dense-first", "adam"),  # Adam's beta powers replicated on the workers, emb on a PS
    ("AllReduce", "while", "adam"),
    ("PSLoadBalancing", "lstm", "momentum"),
])
def test_averaging_optimizer_state_and_control_flow(tmp_path, spec_file, strategy, model, optimizer):
    _train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer)


@pytest.mark.full
@pytest.mark.parametrize("strategy", BUILDERS)
@pytest.mark.parametrize("optimizer", ["adam", "momentum", "rmsprop", "adagrad"])
@pytest.mark.parametrize("model", ["sparse", "dense-first"])
def test_optimizer_matrix(tmp_path, spec_file, strategy, optimizer, model):
    _train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer)


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["PS", "PSLoadBalancing", "AllReduce", "PartitionedPS", "Parallax"])
@pytest.mark.parametrize("model", ["while", "lstm"])
def test_control_flow_matrix(tmp_path, spec_file, strategy, model):
    _train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer="adam")


@pytest.mark.parametrize("strategy,model", [("PS", "keras"), ("AllReduce", "mts"), ("PSLoadBalancing", "mts"), ("AllReduce", "keras")])
def test_equivalence_same_data(tmp_path, spec_file, strategy, model):
    _train_and_compare(tmp_path, spec_file, strategy, model, "same")


@pytest.mark.full
@pytest.mark.parametrize("strategy", BUILDERS)
@pytest.mark.parametrize("model", ["dense", "sparse", "keras", "mts"])
@pytest.mark.parametrize("data", ["same", "per-worker"])
def test_oracle_matrix(tmp_path, spec_file, strategy, model, data):
    _train_and_compare(tmp_path, spec_file, strategy, model, data)
