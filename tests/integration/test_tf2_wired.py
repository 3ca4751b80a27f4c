"""TF2 mode's surroundings wired into real 2-worker adrun jobs (adrun/runtime/import_hook.py
registers adrun/runtime/tf2/around.py): chief-only saving with --shard-data under the averaging
oracle (and tf_keras's under the equivalence oracle), --max-restarts resuming exactly from BackupAndRestore
and from a CheckpointManager, and the refusal of an untested TensorFlow (and
ADRUN_ALLOW_UNTESTED_VERSIONS=1 running it anyway). Auto and `adrun profile` on TF2 scripts:
tests/integration/test_tf2_auto.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun, write_spec
from tests.support.paths import REPO, SCRIPTS
from tests.support.tf2_oracle import SCRIPT, TOLERANCE, adrun_fit, kind_env, max_difference, plain, weights
from tests.support.untested_versions import UNTESTED_TF, untested_tensorflow_env

pytestmark = pytest.mark.timeout(600)


def _saved_files(save: Path) -> list[str]:
    return sorted(str(p.relative_to(save)) for p in save.rglob("*") if p.is_file())


def _assert_worker_1_saved_nothing(tmp_path: Path) -> None:
    """No file of worker 1 under `tmp_path` but the script's own per-worker outputs (its weights and
    the optimizer's step count), which are no saves."""
    own = ("w1.npz", "iterations-w1.txt")
    # paths below tmp_path only: tmp_path itself names the xdist worker ("popen-gw1")
    found = [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.name not in own]
    assert not [p for p in found if "w1" in str(p)], "a file of worker 1 appeared"



def _assert_killed_after_epoch_1_and_resumed_at_2(out: Path) -> None:
    """From the script's begun.txt (worker, attempt, epoch per line): worker 0's first attempt began
    epochs 0 and 1 only (the capture's too), and both workers of the second began at epoch 2."""
    begun = [tuple(map(int, line.split())) for line in (out / "begun.txt").read_text().splitlines()]
    assert sorted({e for w, a, e in begun if a == 0 and w == 0}) == [0, 1]
    assert sorted(e for w, a, e in begun if a == 1) == [2, 2]

def test_chief_only_saving_and_shard_data_in_a_two_worker_fit(tmp_path: Path) -> None:
    """Every worker gets the whole data and saves into files named after it; --shard-data gives
    worker w rows w::2 (the averaging oracle), and only worker 0's files exist, holding its weights."""
    save = tmp_path / "saved"
    _, out = adrun_fit(tmp_path, "fit-sequential", 2, "--save", str(save), adrun_options=("--shard-data",))
    expected = weights(plain("fit-sequential", tmp_path / "ref", "--data", "per-worker", "--reference", "2")
                       / "reference.npz")
    found = [weights(out / f"w{w}.npz") for w in range(2)]
    assert max(max_difference(f, expected) for f in found) < TOLERANCE

    assert _saved_files(save) == ["ckpt-w0/e1.weights.h5", "ckpt-w0/e2.weights.h5", "manager-w0/checkpoint",
                                  "manager-w0/ckpt-1.data-00000-of-00001", "manager-w0/ckpt-1.index", "model-w0.keras"]
    _assert_worker_1_saved_nothing(tmp_path)
    loaded = tmp_path / "loaded"
    subprocess.run([sys.executable, str(SCRIPTS / "tf2_load_saved.py"), str(save), str(loaded)], check=True,
                   cwd=REPO, capture_output=True, timeout=300)
    for name in ("model", "epoch", "manager"):
        assert max_difference(weights(loaded / f"{name}.npz"), found[0]) == 0.0, name


@pytest.mark.full  # a 2-worker tf_keras job, its plain run and a reader
def test_tf_keras_chief_only_saving_in_a_two_worker_fit(tmp_path: Path) -> None:
    """tf_keras (TF_USE_LEGACY_KERAS=1) saves as Keras 3 does: ModelCheckpoint, `keras.models.save_model`
    and a CheckpointManager write only worker 0's files, the chief's load of its model alone (no
    other worker loads) does not wait for them, and every file holds the plain run's weights."""
    kind = "tfkeras-new"
    save = tmp_path / "saved"
    _, out = adrun_fit(tmp_path, kind, 2, "--skew-seed", "--save", str(save))
    expected = weights(plain(kind, tmp_path / "plain") / "w0.npz")
    assert max(max_difference(weights(out / f"w{w}.npz"), expected) for w in range(2)) <= TOLERANCE
    assert _saved_files(save) == [
        "ckpt-w0/e1.weights.h5", "ckpt-w0/e2.weights.h5", "manager-w0/checkpoint",
        "manager-w0/ckpt-1.data-00000-of-00001", "manager-w0/ckpt-1.index", "model-w0.keras"]
    _assert_worker_1_saved_nothing(tmp_path)
    loaded = tmp_path / "loaded"
    subprocess.run([sys.executable, str(SCRIPTS / "tf2_load_saved.py"), str(save), str(loaded)], check=True,
                   cwd=REPO, capture_output=True, timeout=300, env={**os.environ, **kind_env(kind)})
    for name in ("model", "epoch", "manager"):
        assert max_difference(weights(loaded / f"{name}.npz"), expected) <= TOLERANCE, name


@pytest.mark.full  # two attempts of a 2-worker job and a plain run
def test_max_restarts_resumes_exactly_from_backup_and_restore(tmp_path: Path) -> None:
    """Worker 0 is killed at the end of epoch 1 of 3 on the first attempt (after its backup); the
    second attempt resumes at epoch 2 and ends where an uninterrupted plain run ends."""
    backup = tmp_path / "backup"
    result, out = adrun_fit(tmp_path, "fit-sequential", 2, "--epochs", "3", "--backup", str(backup),
                            "--kill-after-epoch", "1", adrun_options=("--max-restarts", "1"))
    _assert_killed_after_epoch_1_and_resumed_at_2(out)
    expected = weights(plain("fit-sequential", tmp_path / "plain", "--epochs", "3") / "w0.npz")
    assert max(max_difference(weights(out / f"w{w}.npz"), expected) for w in range(2)) < TOLERANCE
    assert not backup.exists()  # BackupAndRestore deleted it at the end of the completed fit


@pytest.mark.full  # two attempts of a 2-worker job and a plain run
def test_max_restarts_resumes_exactly_from_a_checkpoint_manager(tmp_path: Path) -> None:
    """A tf.function loop saving a CheckpointManager (weights, Adam's state, the epoch) at each epoch's
    end; worker 0 is killed after epoch 1's checkpoint on the first attempt. The second attempt's
    workers restore the chief's checkpoint, resume at epoch 2 and end where an uninterrupted plain run
    ends; only the chief's checkpoints are in the directory."""
    manager = tmp_path / "manager"
    _, out = adrun_fit(tmp_path, "loop-function", 2, "--epochs", "3", "--manager", str(manager),
                       "--kill-after-epoch", "1", adrun_options=("--max-restarts", "1"))
    _assert_killed_after_epoch_1_and_resumed_at_2(out)
    expected = weights(plain("loop-function", tmp_path / "plain", "--epochs", "3") / "w0.npz")
    assert max(max_difference(weights(out / f"w{w}.npz"), expected) for w in range(2)) <= TOLERANCE
    assert _saved_files(manager) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index",
                                     "ckpt-3.data-00000-of-00001", "ckpt-3.index"]


def test_an_untested_tensorflow_is_refused_by_capture(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "cluster.yml", 2, 0)
    out = tmp_path / "out"
    refused = run_adrun("--spec", str(spec), "--quiet", SCRIPT, "--kind", "fit-sequential", "--out", str(out),
                        env=untested_tensorflow_env(tmp_path))
    assert refused.returncode == 2, refused.output
    assert "Traceback" not in refused.output
    [line] = [line for line in refused.stderr.splitlines() if line.startswith("adrun: error: ")]
    assert f"TF2 mode was tested with tensorflow 2.21.x, keras 3.15.x, tf_keras 2.21.x, and found tensorflow " \
           f"{UNTESTED_TF}" in line, line
    assert "set ADRUN_ALLOW_UNTESTED_VERSIONS=1 to try anyway" in line, line
    assert not (out / "epochs.txt").exists()  # refused at the first apply, before an epoch ended
    assert leftover_processes(refused.job_id) == []


@pytest.mark.full  # a whole 2-worker job more
def test_an_untested_tensorflow_runs_when_allowed(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "cluster.yml", 2, 0)
    out = tmp_path / "out"
    allowed = run_adrun("--spec", str(spec), "--quiet", SCRIPT, "--kind", "fit-sequential", "--out", str(out),
                        env={**untested_tensorflow_env(tmp_path), "ADRUN_ALLOW_UNTESTED_VERSIONS": "1"})
    assert allowed.returncode == 0, allowed.output
    expected = weights(plain("fit-sequential", tmp_path / "plain") / "w0.npz")
    assert max(max_difference(weights(out / f"w{w}.npz"), expected) for w in range(2)) < TOLERANCE
    assert leftover_processes(allowed.job_id) == []
