"""A TF2 worker's steps reach the launcher as graph mode's do: one per optimizer apply, counted
when it runs (inside Keras's steps_per_execution loop too), with the batch size and the all-reduce
bytes; --max-steps ends every worker after exactly that step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun, write_spec
from tests.support.tf2_oracle import SCRIPT

pytestmark = pytest.mark.timeout(300)


def test_max_steps_inside_a_steps_per_execution_loop(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "cluster.yml", workers=2, ps=0)
    report = tmp_path / "result.json"
    result = run_adrun("--spec", str(spec), "--quiet", "--max-steps", "3", "--result-json", str(report),
                       SCRIPT, "--kind", "spe", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.output
    tasks = json.loads(report.read_text())["tasks"]
    # 4 dense variables of 8x16, 16, 16x1 and 1 float32 values: 161 * 4 bytes in one buffer
    assert [(t["task"], t["exit_code"], t["steps"], t["examples_per_step"], t["allreduce_bytes_per_step"])
            for t in tasks] == [("w0", 0, 3, 8, 644), ("w1", 0, 3, 8, 644)]
    assert not (tmp_path / "out" / "w0.npz").exists()  # ended inside training, as graph mode's bound does
    assert leftover_processes(result.job_id) == []
