"""TF2 scripts under parameter-server plans (adrun/runtime/tf2/ps_*.py): synchronous plans equal
the mean-gradient reference and the plain run (the oracles of tests/tf2_oracle.py), bounded
staleness keeps every worker's update, asynchronous training waits for no worker and applies every
worker's every step, and the chief's checkpoints load into a plain run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import flat, run_adrun, write_spec
from tests.support.paths import REPO, SCRIPTS
from tests.support.tf2_oracle import (SCRIPT, TOLERANCE, adrun_fit, averaging, equivalence, kind_env, max_difference,
                                      weights)

pytestmark = pytest.mark.timeout(600)

PS = ("--strategy", "PS")
BALANCED = ("--strategy", "PSLoadBalancing")
PARTITIONED = ("--strategy", "PartitionedPS")
STEPS = 8  # per worker: 2 epochs of 32 rows in batches of 8 (tests/scripts/tf2_model.py, --data per-worker)


# embed-adam's slots and rows on a PS: test_partitioned_over_two_ps (split) in make test, whole in -m full
@pytest.mark.parametrize("kind", ["fit-sequential", pytest.param("embed-adam", marks=pytest.mark.full)])
def test_synchronous_averaging(tmp_path: Path, kind: str) -> None:
    """The chief applies the mean of both workers' gradients (dense sums; sparse rows gathered)."""
    off, between = averaging(tmp_path, kind, ps=1, strategy=PS)
    assert off <= TOLERANCE
    assert between == 0.0  # one shared copy of every variable


@pytest.mark.full
@pytest.mark.parametrize("kind", ["loop-function", "tfkeras-new", "tfkeras-legacy", "gan"])
def test_synchronous_averaging_of_more_kinds(tmp_path: Path, kind: str) -> None:
    off, between = averaging(tmp_path, kind, ps=1, strategy=PS)
    assert off <= TOLERANCE
    assert between == 0.0


@pytest.mark.full
@pytest.mark.parametrize("kind", ["fit-sequential", "embed-adam", "embed-sgd"])
def test_load_balanced_over_two_ps(tmp_path: Path, kind: str) -> None:
    off, between = averaging(tmp_path, kind, ps=2, strategy=BALANCED)
    assert off <= TOLERANCE
    assert between == 0.0


@pytest.mark.parametrize("kind", ["embed-adam", pytest.param("fit-sequential", marks=pytest.mark.full),
                                  pytest.param("embed-sgd", marks=pytest.mark.full),
                                  pytest.param("loop-function", marks=pytest.mark.full)])
def test_partitioned_over_two_ps(tmp_path: Path, kind: str) -> None:
    """Every variable of 2 rows or more split over both PSs (ps_shards.py): reads join the shards,
    each shard updated on its PS, slots split as their variable."""
    off, between = averaging(tmp_path, kind, ps=2, strategy=PARTITIONED)
    assert off <= TOLERANCE
    assert between == 0.0


@pytest.mark.parametrize(("kind", "strategy"), [("embed-sgd", PARTITIONED),
                                                pytest.param("embed-adam", BALANCED, marks=pytest.mark.full)])
def test_many_duplicate_ids_per_batch(tmp_path: Path, kind: str, strategy: tuple[str, ...]) -> None:
    """A batch's 40 ids over a 6-row table: lookups read each distinct row once (ps_gather.py), SGD's
    rows are pushed summed per id and Adam's row for row (ps_apply.py, duplicate_rows.py): exact."""
    off, between = averaging(tmp_path, kind, ps=2, strategy=strategy, script_args=("--vocab", "6"))
    assert off <= TOLERANCE
    assert between == 0.0


def test_partitioned_tf_keras_is_refused_when_planned(tmp_path: Path) -> None:
    """tf_keras would train and save a split variable's shards as variables of their own: the
    capture records the script's Keras, and the plan is refused before any task starts."""
    spec = write_spec(tmp_path / "cluster.yml", 2, 2)
    result = run_adrun("--spec", str(spec), *PARTITIONED, SCRIPT, "--kind", "tfkeras-new",
                       "--out", str(tmp_path / "out"), env=kind_env("tfkeras-new"))
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    text = flat(result.output)
    [line] = [line for line in result.stderr.splitlines() if line.startswith("adrun: error: ")]
    assert "'dense_1/kernel', 'dense_1/bias', 'dense/kernel' split over PS tasks: TF2 mode splits a " \
        "variable over PS tasks for Keras 3 only, and the script trains with tf_keras" in line, text
    assert not (tmp_path / "out" / "w0.npz").exists()  # no worker trained
    assert leftover_processes(result.job_id) == []


@pytest.mark.full
@pytest.mark.parametrize("kind", ["fit-sequential", "loop-function"])
def test_equivalence(tmp_path: Path, kind: str) -> None:
    """Worker 1, seeded differently, trains the chief's initial values."""
    assert equivalence(tmp_path, kind, ps=1, strategy=PS) <= TOLERANCE


@pytest.mark.full
def test_staleness_applies_every_worker_update(tmp_path: Path) -> None:
    """Bounded staleness: each worker applies its own gradient to the shared variables, so the shared
    step count is the sum of the workers' steps."""
    _, out = adrun_fit(tmp_path, "fit-sequential", 2, "--data", "per-worker", ps=1,
                       strategy=("--strategy", "PS", "--strategy-opt", "staleness=1"))
    assert max(int((out / f"iterations-w{w}.txt").read_text()) for w in range(2)) == 2 * STEPS


@pytest.mark.full
def test_asynchronous_waits_for_no_worker(tmp_path: Path) -> None:
    """Worker 1 stops after its first step until worker 0 has finished all its steps, which only
    asynchronous training allows; every apply of both reaches the PS's shared step count."""
    _, out = adrun_fit(tmp_path, "fit-sequential", 2, "--data", "per-worker", "--wait-for-w0", ps=1,
                       strategy=("--strategy", "PS", "--strategy-opt", "sync=false"))
    assert int((out / "iterations-w0.txt").read_text()) in (STEPS, STEPS + 1)  # worker 1's first step, or not
    assert int((out / "iterations-w1.txt").read_text()) == 2 * STEPS


@pytest.mark.full
@pytest.mark.parametrize("kind, ps, strategy", [("fit-sequential", 1, PS), ("embed-adam", 2, PARTITIONED)])
def test_chief_checkpoints_load_in_a_plain_run(tmp_path: Path, kind: str, ps: int, strategy: tuple[str, ...]) -> None:
    """The chief's .keras file, last epoch's weights and CheckpointManager checkpoint have the plain
    model's names and shapes, split variables too: a plain process restores each and gets the
    weights the workers trained."""
    save = tmp_path / "saved"
    _, out = adrun_fit(tmp_path, kind, 2, "--data", "per-worker", "--save", str(save), ps=ps, strategy=strategy)
    loaded = subprocess.run([sys.executable, str(SCRIPTS / "tf2_load_saved.py"), str(save), str(tmp_path / "loaded")],
                            cwd=REPO, env=kind_env(kind), capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr
    trained = weights(out / "w0.npz")
    for name in ("model", "epoch", "manager"):
        assert max_difference(weights(tmp_path / "loaded" / f"{name}.npz"), trained) == 0.0, name
    assert not (save / "model-w1.keras").exists()  # only the chief writes


@pytest.mark.full
def test_negative_control_asynchronous_fails_the_averaging_oracle(tmp_path: Path) -> None:
    """With `sync=false` each worker applies its own gradient: the averaging oracle must catch it."""
    off, _ = averaging(tmp_path, "fit-sequential", ps=1, strategy=("--strategy", "PS", "--strategy-opt", "sync=false"))
    assert off > 100 * TOLERANCE
