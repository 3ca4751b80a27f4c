"""chief_only.py pieces in process: where a non-chief's writes go, and how its Keras 3
BackupAndRestore recovers from a corrupt backup (its repair copy made in the scratch directory)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from adrun.runtime.context import TaskContext  # noqa: E402
from adrun.runtime.tf2 import chief_only  # noqa: E402

OTHER = TaskContext(mode="run", role="worker", task_index=1, num_workers=2, job_id="j", cluster={},
                    strategy_file=None, capture_out=None)


def test_elsewhere_mirrors_the_path_under_the_scratch_directory_once():
    root = chief_only.scratch_root(OTHER)
    target = chief_only.elsewhere(OTHER, "runs/a/model.keras")
    assert target == os.path.join(root, os.path.abspath("runs/a/model.keras").lstrip("/"))
    assert os.path.isdir(os.path.dirname(target))
    assert chief_only.elsewhere(OTHER, target) == target  # a writer called through another one
    assert chief_only.elsewhere(OTHER, "gs://bucket/ckpt") == os.path.join(root, "gs", "bucket", "ckpt")


def test_backup_and_restore_recovers_from_the_previous_backup_without_touching_the_chiefs_files(tmp_path, monkeypatch):
    from keras.src.callbacks.backup_and_restore import BackupAndRestore

    for name in ("on_train_begin", "_save_model", "on_train_end"):  # undone after the test
        monkeypatch.setattr(BackupAndRestore, name, getattr(BackupAndRestore, name))
    chief_only.PATCHES["keras.src.callbacks.backup_and_restore"](OTHER)

    def model():
        built = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        built.compile("sgd", "mse")
        return built

    saved = model()
    saved.set_weights([np.full((2, 1), 3.0, "float32"), np.full((1,), 4.0, "float32")])
    saved.save_weights(str(tmp_path / "previous.weights.h5"))
    os.rename(tmp_path / "previous.weights.h5", tmp_path / "latest.weights.h5.bkp")  # as Keras's copy names it
    (tmp_path / "training_metadata.json.bkp").write_text(json.dumps({"epoch": 5, "batch": 0}))
    (tmp_path / "latest.weights.h5").write_bytes(b"torn by a crash")  # the chief's, mid-write
    before = sorted(p.name for p in tmp_path.iterdir())

    resuming = model()
    backup = BackupAndRestore(str(tmp_path))
    backup.set_model(resuming)
    backup.on_train_begin()
    assert [w.tolist() for w in resuming.get_weights()] == [[[3.0], [3.0]], [4.0]]
    assert resuming._initial_epoch == 5
    backup.on_epoch_end(5)
    backup.on_train_end()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing copied, written or deleted
    assert (tmp_path / "latest.weights.h5").read_bytes() == b"torn by a crash"
