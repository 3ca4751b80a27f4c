"""`--shard-data`: an unmodified script reading one dataset trains on disjoint shards."""

from __future__ import annotations

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.integration


def _seen(tmp_path, spec_file, *flags: str) -> list[np.lib.npyio.NpzFile]:
    out = tmp_path / ("sharded" if flags else "whole")
    out.mkdir()
    result = run_adrun("--spec", str(spec_file(workers=2, ps=0)), "--strategy", "AllReduce", "--quiet", *flags,
                       str(SCRIPTS / "shard_model.py"), "--out", str(out))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    return [np.load(out / f"w{w}.npz") for w in (0, 1)]


def test_shard_data_gives_each_worker_a_disjoint_part_of_one_epoch(tmp_path, spec_file):
    w0, w1 = _seen(tmp_path, spec_file, "--shard-data")
    assert len(w0["seen"]) == len(w1["seen"]) == 32
    assert not set(w0["seen"]) & set(w1["seen"])
    assert sorted(set(w0["seen"]) | set(w1["seen"])) == list(range(64))
    assert int(w0["global_step"]) == int(w1["global_step"]) == 8  # 16 batches, 8 synchronous steps


def test_without_shard_data_every_worker_reads_everything(tmp_path, spec_file):
    w0, w1 = _seen(tmp_path, spec_file)
    assert sorted(w0["seen"]) == sorted(w1["seen"]) == list(range(64))
