"""A seeded script starts from the same values under adrun as in its plain run, also when its
variables are partitioned (TF alone would draw each shard separately and shift later seeds).
The training step touches only the first shard of `emb`: sparse all-gathers of a shard no worker
touched must work too."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, SCRIPTS, run_adrun

pytestmark = pytest.mark.integration
SCRIPT = str(SCRIPTS / "seeded_init_model.py")


@pytest.mark.parametrize("strategy", ["PartitionedPS", "RandomAxisPartitionAR"])
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
