"""Checkpoint round trips (docs/testing.md, oracle 3).

A checkpoint written under a strategy must hold the original variable names and full shapes, load
into the plain single-process graph with equal values, be written by the chief only, and restore
into a distributed run under another strategy (every worker then holds the checkpoint's values).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.checkpoints import PLAIN_GRAPH
from tests.support.paths import REPO, SCRIPTS

pytestmark = pytest.mark.integration
SCRIPT = str(SCRIPTS / "checkpoint_model.py")


def _adrun_ok(spec, strategy, *args):
    result = run_adrun("--spec", str(spec), "--strategy", strategy, "--quiet", SCRIPT, *args)
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []


def _round_trip(tmp_path, spec_file, saved_under: str, restored_under: str, mts: bool) -> None:
    spec = spec_file(workers=2, ps=2)
    saved, plain, restored = tmp_path / "saved", tmp_path / "plain", tmp_path / "restored"
    for d in (saved, plain, restored):
        d.mkdir()
    flags = ["--mts"] if mts else []
    _adrun_ok(spec, saved_under, *flags, "--save", str(saved), "--steps", "3")

    checkpoint_dir = saved if mts else saved / "w0"
    stored = dict(tf.train.list_variables(str(checkpoint_dir)))
    assert stored == PLAIN_GRAPH, "checkpoint must hold the original names and full shapes"
    if not mts:
        assert not list((saved / "w1").iterdir()), "a non-chief worker wrote checkpoint files"

    subprocess.run([sys.executable, SCRIPT, *flags, "--restore", str(saved), "--out", str(plain), "--steps", "0"],
                   check=True, capture_output=True, cwd=REPO)
    trained, loaded = np.load(saved / "values_w0.npz"), np.load(plain / "values_w0.npz")
    assert sorted(loaded.files) == sorted(PLAIN_GRAPH)
    for name in PLAIN_GRAPH:
        np.testing.assert_array_equal(loaded[name], trained[name], err_msg=f"plain restore of {name}")

    _adrun_ok(spec, restored_under, *flags, "--restore", str(saved), "--out", str(restored), "--steps", "1")
    for w in (0, 1):
        got = np.load(restored / f"values_w{w}.npz")
        for name in ("emb", "dense/w"):
            np.testing.assert_array_equal(got[name], trained[name], err_msg=f"w{w}: restored {name} under {restored_under}")
        assert int(got["global_step"]) == int(trained["global_step"]) + 1


# One round trip across the PS/all-reduce divide; every pair: test_checkpoint_matrix (-m full)
@pytest.mark.parametrize("saved_under,restored_under,mts", [("AllReduce", "PS", True)])
def test_checkpoint_round_trip(tmp_path, spec_file, saved_under, restored_under, mts):
    _round_trip(tmp_path, spec_file, saved_under, restored_under, mts)


@pytest.mark.full
@pytest.mark.parametrize("saved_under", ["PS", "PSLoadBalancing", "AllReduce"])
@pytest.mark.parametrize("restored_under", ["PS", "AllReduce"])
@pytest.mark.parametrize("mts", [False, True])
def test_checkpoint_matrix(tmp_path, spec_file, saved_under, restored_under, mts):
    _round_trip(tmp_path, spec_file, saved_under, restored_under, mts)
