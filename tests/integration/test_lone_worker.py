"""One worker: no collectives, accumulators or queues; with no PS, a plain local session and no
server (docs/performance.md).

Behaviour must stay that of any other adrun job: the result of plain training (the oracle with
N = 1, whatever the plan), in-graph replicas on their virtual CPU devices, steps counted in the
summary, and checkpoints with the original names that load into the plain graph.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import flat, run_adrun
from tests.support.checkpoints import PLAIN_GRAPH
from tests.support.oracle import STEPS, train_and_compare
from tests.support.paths import REPO, SCRIPTS

pytestmark = pytest.mark.integration


def test_a_lone_worker_with_replicas_trains_as_plain_python(tmp_path, spec_file):
    result = train_and_compare(tmp_path, spec_file, "AllReduce", "sparse", "per-worker", workers=1, ps=0,
                               replicas=2)
    assert "worker 0: 2 in-graph replicas" in result.output
    assert re.search(rf"w0 worker 0 {STEPS} ", flat(result.output)), result.output


def test_one_worker_with_a_staleness_plan_trains_as_plain_python(tmp_path, spec_file):
    """Its step op used to wait on no one and group no op at all: the variables never moved."""
    train_and_compare(tmp_path, spec_file, "PS", "sparse", "per-worker", "staleness=2", workers=1, ps=1)


def test_a_lone_worker_checkpoint_loads_into_the_plain_graph(tmp_path, spec_file):
    script = str(SCRIPTS / "checkpoint_model.py")
    saved, plain = tmp_path / "saved", tmp_path / "plain"
    saved.mkdir(), plain.mkdir()
    result = run_adrun("--spec", str(spec_file(workers=1, ps=0)), "--strategy", "AllReduce", "--quiet",
                       script, "--mts", "--save", str(saved), "--steps", "3")
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    assert dict(tf.train.list_variables(str(saved))) == PLAIN_GRAPH
    subprocess.run([sys.executable, script, "--mts", "--restore", str(saved), "--out", str(plain), "--steps", "0"],
                   check=True, capture_output=True, cwd=REPO)
    trained, loaded = np.load(saved / "values_w0.npz"), np.load(plain / "values_w0.npz")
    assert int(loaded["global_step"]) == 3
    for name in PLAIN_GRAPH:
        np.testing.assert_array_equal(loaded[name], trained[name], err_msg=f"plain restore of {name}")
