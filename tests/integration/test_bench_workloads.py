"""The benchmark's workload scripts run as a user would run them: plain python, and unchanged under adrun."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adrun.launch.job.teardown import leftover_processes
from bench.paths import WORKLOADS_DIR
from tests.support.adrun_cli import run_adrun
from tests.support.bench_workloads import TINY, check_result_file, tiny_batch_size
from tests.support.paths import REPO

pytestmark = [pytest.mark.integration, pytest.mark.full]  # the benchmark's pieces: make test-full

STEPS, WARMUP = 4, 1


@pytest.mark.parametrize("name", ["sparse", pytest.param("dense", marks=pytest.mark.full),
                                  pytest.param("ncf", marks=pytest.mark.full),
                                  pytest.param("embed", marks=pytest.mark.full)])
def test_plain_run_writes_its_timed_steps(tmp_path, name):
    template = str(tmp_path / "w{worker}.json")
    proc = subprocess.run([sys.executable, str(WORKLOADS_DIR / f"{name}.py"), *TINY[name], "--steps", str(STEPS),
                           "--warmup", str(WARMUP), "--result-file", template],
                          capture_output=True, text=True, cwd=REPO, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    check_result_file(tmp_path / "w0.json", name, 0, STEPS - WARMUP, tiny_batch_size(name))


@pytest.mark.parametrize("name", ["sparse", pytest.param("dense", marks=pytest.mark.full),
                                  pytest.param("ncf", marks=pytest.mark.full),
                                  pytest.param("embed", marks=pytest.mark.full)])
def test_unchanged_under_adrun_every_worker_writes_its_timed_steps(tmp_path, spec_file, name):
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--strategy", "PS", "--quiet",
                       str(WORKLOADS_DIR / f"{name}.py"), *TINY[name], "--steps", str(STEPS), "--warmup", str(WARMUP),
                       "--result-file", str(tmp_path / "w{worker}.json"))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    for worker in (0, 1):
        check_result_file(tmp_path / f"w{worker}.json", name, worker, STEPS - WARMUP, tiny_batch_size(name))
