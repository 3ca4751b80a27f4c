"""The equivalence and averaging oracles for TF2 scripts (tests/scripts/tf2_model.py).

Equivalence: every worker fits the same data, worker 1 initialized from another seed; adrun gives it
worker 0's initial values and the mean of identical gradients, so every worker must end where the
plain single-process run ends. Averaging: worker w fits rows w::N; every worker must end where one
plain process ends whose step k saw the union of the workers' step-k batches (`--reference N`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import AdrunResult, run_adrun, write_spec
from tests.support.paths import REPO, SCRIPTS

SCRIPT = str(SCRIPTS / "tf2_model.py")
TOLERANCE = 1e-6  # float32 reordering of the same sums; a missing synchronization is ~1e-2 off
# what the tests that are about something else run (no profiling run of Auto, the default, first)
ALL_REDUCE = ("--strategy", "AllReduce")

# Every kind tests/scripts/tf2_model.py trains (its `by-hand` kind is refused at capture instead).
KINDS = ["fit-sequential", "fit-functional", "fit-subclassed", "train-step", "gan", "loop-function", "loop-eager",
         "embed-adam", "embed-sgd", "mixed-fp16", "spe", "tfkeras-new", "tfkeras-legacy"]


def averaging_tolerance(kind: str) -> float:
    """mixed_float16: against the reference, which runs the forward pass on N times the batch, fp16
    rounding of that pass is left (the workers still agree bit for bit)."""
    return 1e-4 if kind == "mixed-fp16" else TOLERANCE


def weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def max_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [x.shape for x in a] == [y.shape for y in b]
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def kind_env(kind: str) -> dict[str, str]:
    """tf_keras scripts run with TF_USE_LEGACY_KERAS=1, as their users run them."""
    return {"TF_USE_LEGACY_KERAS": "1" if kind.startswith("tfkeras") else "0"}


def plain(kind: str, out: Path, *args: str, env: dict[str, str] | None = None) -> Path:
    """Run the script as plain `python` (no adrun variables); returns its output directory."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ADRUN_")}
    subprocess.run([sys.executable, SCRIPT, "--kind", kind, "--out", str(out), *args], check=True, cwd=REPO,
                   env={**clean, **kind_env(kind), **(env or {})}, capture_output=True, timeout=300)
    return out


def adrun_fit(tmp_path: Path, kind: str, workers: int, *args: str, ps: int = 0,
              strategy: tuple[str, ...] = ALL_REDUCE, adrun_options: tuple[str, ...] = (),
              spec: Path | None = None) -> tuple[AdrunResult, Path]:
    """Train under adrun (`strategy`: its --strategy options, () for the default, Auto;
    `adrun_options`: adrun's other options, such as --shard-data) on `spec`'s cluster (default:
    `workers` workers and `ps` PS on this machine)."""
    out = tmp_path / "out"
    spec = spec or write_spec(tmp_path / f"cluster-{workers}w{ps}ps.yml", workers, ps)
    result = run_adrun("--spec", str(spec), "--quiet", *strategy, *adrun_options, SCRIPT, "--kind", kind, "--out", str(out), *args,
                       env=kind_env(kind))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    return result, out


# Keras 3's sparse Adam updates its second moment per row of an IndexedSlices (it squares each row,
# duplicates included), so N workers' rows of the same batch (each 1/N of the row) are not the one
# process's rows: with the same data on every worker these kinds equal the process that sees the
# batch N times over (the mean-gradient reference of equal batches), not the plain run.
PER_ROW_NONLINEAR = {"embed-adam"}


def equivalence(tmp_path: Path, kind: str, workers: int = 2, ps: int = 0,
                strategy: tuple[str, ...] = ALL_REDUCE, spec: Path | None = None) -> float:
    """Max difference of any worker from the plain run (worker 1 seeded differently, same data), on
    `workers` workers and `ps` PS under `strategy` (as for `adrun_fit`; `spec`: another cluster)."""
    if kind in PER_ROW_NONLINEAR:
        expected = weights(plain(kind, tmp_path / "plain", "--reference", str(workers)) / "reference.npz")
    else:
        expected = weights(plain(kind, tmp_path / "plain") / "w0.npz")
    _, out = adrun_fit(tmp_path, kind, workers, "--skew-seed", ps=ps, strategy=strategy, spec=spec)
    return max(max_difference(weights(out / f"w{w}.npz"), expected) for w in range(workers))


def averaging(tmp_path: Path, kind: str, workers: int = 2, ps: int = 0,
              strategy: tuple[str, ...] = ALL_REDUCE, script_args: tuple[str, ...] = ()) -> tuple[float, float]:
    """(max difference of any worker from the mean-gradient reference, max difference between
    workers) with each worker on its own rows (`ps`, `strategy`: as for `adrun_fit`; `script_args`:
    more options of the script, for both runs)."""
    expected = weights(plain(kind, tmp_path / "ref", "--data", "per-worker", "--reference", str(workers), *script_args)
                       / "reference.npz")
    _, out = adrun_fit(tmp_path, kind, workers, "--data", "per-worker", *script_args, ps=ps, strategy=strategy)
    found = [weights(out / f"w{w}.npz") for w in range(workers)]
    return (max(max_difference(f, expected) for f in found),
            max(max_difference(f, found[0]) for f in found[1:]))
