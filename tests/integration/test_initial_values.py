"""A seeded script starts from the same values under adrun as in its plain run, also when its
variables are partitioned (TF alone would draw each shard separately and shift later seeds).
The training step touches only the first shard of `emb`: sparse all-gathers of a shard no worker
touched must work too.

Variables that take their shape from their initial value (`get_variable(name, initializer=<value>)`,
no `shape=`) are partitioned too, start from the plain run's values and train to the plain run's
values (equivalence oracle), and the checkpoint the chief saves loads into the plain graph."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import REPO, SCRIPTS

pytestmark = pytest.mark.integration
SCRIPT = str(SCRIPTS / "seeded_init_model.py")


@pytest.mark.parametrize("strategy", ["PartitionedPS", pytest.param("RandomAxisPartitionAR", marks=pytest.mark.full)])
def test_partitioned_variables_start_from_the_plain_runs_values(tmp_path, spec_file, strategy):
    subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path)], check=True, capture_output=True, cwd=REPO)
    result = run_adrun("--spec", str(spec_file(workers=2, ps=2)), "--strategy", strategy,
                       "--strategy-opt", "shards=2" if strategy.endswith("AR") else "max_shards=2",
                       SCRIPT, "--out", str(tmp_path), env={"COLUMNS": "200"})
    assert result.returncode == 0, result.output
    assert "2 shards on axis" in result.output  # the plan really partitioned the variables
    plain, chief = np.load(tmp_path / "plain.npz"), np.load(tmp_path / "w0.npz")
    assert sorted(plain.files) == sorted(chief.files) == ["emb", "noise", "w"]
    for key in plain.files:
        np.testing.assert_array_equal(chief[key], plain[key], err_msg=key)


INIT_VALUE_SCRIPT = str(SCRIPTS / "init_value_model.py")
INIT_VALUE_CHECKPOINT = {"emb": [11, 4], "head/w": [4, 3], "head/b": [3], "out/w": [3, 1], "global_step": []}


@pytest.fixture(scope="module")
def init_value_plain_run(tmp_path_factory) -> Path:
    """The plain run's plain.npz, shared by the strategies compared with it."""
    out = tmp_path_factory.mktemp("plain")
    subprocess.run([sys.executable, INIT_VALUE_SCRIPT, "--out", str(out)], check=True, capture_output=True, cwd=REPO)
    return out / "plain.npz"


@pytest.mark.parametrize("strategy,ps", [("PartitionedPS", 2), pytest.param("PartitionedAR", 0, marks=pytest.mark.full)])
def test_variables_shaped_by_their_initial_value_partition_and_train_as_the_plain_run(
        tmp_path, spec_file, init_value_plain_run, strategy, ps):
    out, saved = tmp_path / "out", tmp_path / "saved"
    out.mkdir()
    saved.mkdir()
    result = run_adrun("--spec", str(spec_file(workers=2, ps=ps)), "--strategy", strategy,
                       INIT_VALUE_SCRIPT, "--out", str(out), "--save", str(saved), env={"COLUMNS": "200"})
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    # every variable was cut, and the plan table names the shards the script's tf.trainable_variables() lists
    for name in ("emb", "head/w", "head/b", "out/w"):
        assert f"{name} → {name}/part_0..part_1" in result.output

    plain, chief = np.load(init_value_plain_run), np.load(out / "w0.npz")
    assert sorted(chief.files) == sorted(plain.files)
    assert chief["init/emb"].dtype == np.float64  # the dtype of the numpy array, as in the plain run
    for key in plain.files:
        if key.startswith("init/"):
            np.testing.assert_array_equal(chief[key], plain[key], err_msg=key)
        else:
            np.testing.assert_allclose(chief[key], plain[key], rtol=1e-6, atol=1e-9, err_msg=key)
    assert not np.allclose(plain["final/emb"], plain["init/emb"])  # the oracle can fail: training moved them

    assert dict(tf.train.list_variables(str(saved))) == INIT_VALUE_CHECKPOINT, "original names and full shapes"
    subprocess.run([sys.executable, INIT_VALUE_SCRIPT, "--out", str(out), "--restore", str(saved)],
                   check=True, capture_output=True, cwd=REPO)
    restored = np.load(out / "restored.npz")
    for name in INIT_VALUE_CHECKPOINT:
        key = name if name == "global_step" else f"final/{name}"
        np.testing.assert_array_equal(restored[name], chief[key], err_msg=f"plain restore of {name}")
