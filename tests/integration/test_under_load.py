"""Jobs that share the machine with another job: CPU contention must not change the outcome.

Two Parallax jobs at once on 2 cores used to fail about one run in three: a non-chief's release
wait on PS 0 was aborted with `Cleanup <step id>` when the chief's step ended first (TensorFlow
shares a step id among the workers' steps with collectives; see adrun/runtime/kernels/step_order.py).

Each job trains the oracle's sparse model (tests/scripts/oracle_model.py: an embedding on the PSs,
a dense head all-reduced: the mixed step that raced) on each worker's own data, so besides every
run ending well, each must compute the same thing: the first job's workers equal the averaging
oracle, and every worker of every job of every round ends bit for bit where that one did (its
initializers are seeded, and a synchronous step sums two workers' gradients in either order alike).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun, write_spec
from tests.support.oracle import NUM_WORKERS, SCRIPT, assert_matches_reference

pytestmark = [pytest.mark.integration, pytest.mark.full]

ROUNDS = 3
JOBS_AT_ONCE = 2
STEPS = 200  # many short mixed steps: each is a chance for the chief to end its step first
MODEL = [SCRIPT, "--model", "sparse", "--data", "per-worker", "--steps", str(STEPS)]


def _log_tails(log_dir: Path) -> str:
    return "\n".join(f"--- {f.name}\n" + "\n".join(f.read_text().splitlines()[-15:]) for f in sorted(log_dir.glob("*.log")))


def _finals(out: Path) -> dict[str, np.ndarray]:
    """Every worker's final variables and global_step, keyed `w<i>/<name>`."""
    finals = {}
    for w in range(NUM_WORKERS):
        values = np.load(out / f"w{w}.npz")
        finals |= {f"w{w}/{key}": values[key] for key in values.files if key.startswith("final/") or key == "global_step"}
    return finals


def test_mixed_all_reduce_and_ps_jobs_survive_each_other(tmp_path):
    spec = write_spec(tmp_path / "cluster.yml", workers=NUM_WORKERS, ps=2)

    def job(name: str):
        out = tmp_path / name
        args = ("--spec", str(spec), "--strategy", "Parallax", "--quiet", "--log-dir", str(out / "logs"),
                *MODEL, "--out", str(out))
        # a hang becomes a DeadlineExceededError naming the op, well before the test's timeout
        return out, run_adrun(*args, env={"ADRUN_OP_TIMEOUT": "90"}, timeout=280)

    first = None
    for round_ in range(ROUNDS):
        with ThreadPoolExecutor(JOBS_AT_ONCE) as pool:
            results = list(pool.map(job, [f"round{round_}-job{j}" for j in range(JOBS_AT_ONCE)]))
        for out, result in results:
            assert result.returncode == 0, result.output[-2000:] + _log_tails(out / "logs")
            assert leftover_processes(result.job_id) == []
            if first is None:
                assert_matches_reference(out, MODEL, NUM_WORKERS, STEPS, f"Parallax under load, {out.name}")
                first = _finals(out)
            finals = _finals(out)
            assert finals.keys() == first.keys()
            for key, value in first.items():
                np.testing.assert_array_equal(finals[key], value, err_msg=f"{out.name}: {key}")
