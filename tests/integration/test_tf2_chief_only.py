"""TF2 mode, chief-only writes: a non-chief worker running a Keras 3 script that saves through
every covered API leaves no file at the chief's paths, still reads back what it saved, and resumes
from the chief's BackupAndRestore and CheckpointManager state (adrun/runtime/tf2/chief_only.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.integration


def _worker(out: Path, index: int, phase: str, script: str = "tf2around_saving.py", **extra_env: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRUN_") and k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run([sys.executable, str(SCRIPTS / script), str(out), str(index), phase],
                          capture_output=True, text=True, timeout=180,
                          env={**env, "TF_CPP_MIN_LOG_LEVEL": "2", **extra_env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`: relative path -> (size, mtime in ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_only_the_chief_writes_and_every_worker_resumes_from_the_chiefs_state(tmp_path):
    out = tmp_path / "out"
    out.mkdir()

    other = _worker(out, 1, "train")
    assert list(out.iterdir()) == []  # not a file, not a directory
    assert other["reloaded_equal"] is True  # load_model read the worker's own copy back
    assert "checkpoints" not in other["scratch_dirs"]  # ModelCheckpoint saved nothing, even there
    assert other["written"].startswith(other["scratch"] + "/")
    assert not Path(other["scratch"]).exists()  # the scratch directory went with the process

    chief = _worker(out, 0, "train")
    written = _files(out)
    names = {name if "tfevents" not in name else name.split("events")[0] + "events" for name in written}
    assert names == {
        "backup/latest.weights.h5", "backup/training_metadata.json",
        "checkpoints/e1.keras", "checkpoints/e2.keras", "checkpoints/e1.weights.h5", "checkpoints/e2.weights.h5",
        "model.keras", "final.weights.h5", "summaries/events", "tensorboard/train/events",
        "tf/written.index", "tf/written.data-00000-of-00001", "tf/checkpoint", "tf/saved-1.index",
        "tf/saved-1.data-00000-of-00001", "manager/checkpoint", "manager/ckpt-3.index",
        "manager/ckpt-3.data-00000-of-00001",
    }
    assert chief["written"] == str(out / "tf" / "written")

    resumed = _worker(out, 1, "resume")
    assert resumed["weights_at_begin"] == chief["final_weights"]  # the chief's backup, bit for bit
    assert resumed["epochs_run"] == 1  # epochs 1 and 2 were the chief's: only epoch 3 runs
    assert resumed["restored_step"] == 8  # the chief's latest CheckpointManager checkpoint
    assert _files(out) == written  # neither its backup, its deletion, its manager's save nor its sweep touched them


@pytest.mark.full  # the same patch points as above for tf_keras; 3 more TF processes
def test_tf_keras_only_the_chief_writes_and_a_worker_resumes_from_the_chiefs_backup(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    legacy = {"script": "tf2around_saving_tf_keras.py", "TF_USE_LEGACY_KERAS": "1"}

    other = _worker(out, 1, "train", **legacy)
    assert list(out.iterdir()) == []
    assert other["reloaded_equal"] is True
    assert other["scratch_files"] == ["final.weights.h5", "model.keras"]  # callbacks' copies deleted after each save

    chief = _worker(out, 0, "train", **legacy)
    written = _files(out)
    assert set(written) == {
        "backup/chief/checkpoint", "backup/chief/ckpt-2.index", "backup/chief/ckpt-2.data-00000-of-00001",
        "checkpoints/e1.h5", "checkpoints/e2.h5", "weights/checkpoint", "weights/e1.index",
        "weights/e1.data-00000-of-00001", "weights/e2.index", "weights/e2.data-00000-of-00001",
        "model.keras", "final.weights.h5",
    }

    resumed = _worker(out, 1, "resume", **legacy)
    assert resumed["weights_at_begin"] == chief["final_weights"]  # the chief's backup after epoch 2
    assert resumed["epochs_run"] == 2  # epochs 3 and 4
    assert _files(out) == written  # its backups and the backup's deletion at the end stayed its own
