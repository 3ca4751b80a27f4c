"""The equivalence/averaging oracle run shared by the integration tests (docs/testing.md).

Trains tests/scripts/oracle_model.py under adrun, then computes in a separate plain process what
synchronous data-parallel SGD over the workers' batches must give from the chief's initial values,
averaging the per-worker gradients independently in numpy. Every worker's final variables must
match it, and global_step must equal the number of steps.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import AdrunResult, run_adrun
from tests.support.paths import REPO, SCRIPTS

STEPS = 3
NUM_WORKERS = 2
TWO_PS = {"PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "Parallax"}
ORACLE_BUILDERS = ["PS", "PSLoadBalancing", "AllReduce", "PartitionedPS", "UnevenPartitionedPS", "Parallax",
                   "PartitionedAR", "RandomAxisPartitionAR", "Auto"]
SCRIPT = str(SCRIPTS / "oracle_model.py")


def train_and_compare(tmp_path: Path, spec_file: Callable[..., Path], strategy: str, model: str, data: str,
                      *options: str, optimizer: str = "sgd", replicas: int | None = None,
                      edit_plan: Callable[[dict[str, Any]], None] | None = None, workers: int = NUM_WORKERS,
                      ps: int | None = None, script_options: Sequence[str] = (),
                      model_options: Sequence[str] = ()) -> AdrunResult:
    """Run the oracle on `workers` workers and `ps` PS processes (default: what the strategy needs);
    `replicas` sets the node's in-graph replicas per worker, `edit_plan` edits the built strategy
    document (as a dict) before the run, as a user editing the YAML would, and `script_options` go
    to the training run of oracle_model.py only (as `--graph`), `model_options` to the training and
    the reference run (as `--combiner sqrtn`)."""
    out = tmp_path / "out"
    node_fields = {"replicas": replicas} if replicas is not None else {}
    spec = spec_file(workers=workers, ps=ps if ps is not None else 2 if strategy in TWO_PS else 1, **node_fields)
    opts = [arg for option in options for arg in ("--strategy-opt", option)]
    script = [SCRIPT, "--model", model, *model_options, "--data", data, "--optimizer", optimizer, "--steps", str(STEPS)]
    if edit_plan is not None:
        plan_file = tmp_path / "plan.yml"
        built = run_adrun("strategy", "build", strategy, "--spec", str(spec), *opts, "-o", str(plan_file),
                          *script, "--out", str(out))
        assert built.returncode == 0, built.output
        plan = yaml.safe_load(plan_file.read_text())
        edit_plan(plan)
        plan_file.write_text(yaml.safe_dump(plan))
        strategy, opts = str(plan_file), []
    result = run_adrun("--spec", str(spec), "--strategy", strategy, *opts, *script, *script_options, "--out", str(out))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    assert_matches_reference(out, script, workers, STEPS, f"{strategy}, {model}, {data}")
    return result


def assert_matches_reference(out: Path, script: list[str], workers: int, steps: int, label: str) -> None:
    """Every worker's final variables in `out` (written by `script`, an oracle_model.py command line
    without --out) equal the plain reference process's, which starts from the chief's initial values,
    and global_step is `steps` everywhere."""
    subprocess.run([sys.executable, *script, "--out", str(out), "--reference", str(workers),
                    "--init-from", str(out / "w0.npz")], check=True, capture_output=True, cwd=REPO)
    reference = np.load(out / "reference.npz")
    chief = np.load(out / "w0.npz")
    for w in range(workers):
        got = np.load(out / f"w{w}.npz")
        assert int(got["global_step"]) == steps, f"w{w}: global_step"
        for key in reference.files:
            if key.startswith("final/"):
                name = key[len("final/"):]
                np.testing.assert_allclose(got[key], reference[key], rtol=1e-5, atol=1e-6,
                                           err_msg=f"w{w}: {name} after {steps} steps ({label})")
    # the oracle must be able to fail: training moved the variables
    assert any(not np.allclose(chief[k.replace("final/", "init/")], reference[k])
               for k in reference.files if k.startswith("final/"))
