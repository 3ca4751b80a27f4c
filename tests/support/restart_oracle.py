"""The restart oracle: tests/scripts/restart_model.py trains with checkpoints every 5 steps on
batches that are a function of global_step, so a job killed and resumed must end at the variables
of an uninterrupted plain run of the same steps. The script pauses at PAUSE_AT and says so with a
file (`--pause-on`, `--pause-at`), the event a test waits for before it kills a task."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.support.paths import REPO, SCRIPTS

MODEL = str(SCRIPTS / "restart_model.py")
STEPS = 30
PAUSE_AT = 12  # checkpoints at 0, 5, 10: a resumed attempt starts at 10


def assert_ends_as_an_uninterrupted_run(out: Path, tmp_path: Path) -> None:
    """Every worker's final variables (`out`/values_w<i>.npz) equal those of a plain run of all STEPS."""
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    subprocess.run([sys.executable, MODEL, "--checkpoint-dir", str(plain_dir / "ckpt"), "--out", str(plain_dir),
                    "--steps", str(STEPS)], check=True, capture_output=True, cwd=REPO, timeout=300)
    plain = np.load(plain_dir / "values_w0.npz")
    for w in (0, 1):
        got = np.load(out / f"values_w{w}.npz")
        assert int(got["global_step"]) == STEPS
        for name in ("dense/w", "dense/b"):
            np.testing.assert_allclose(got[name], plain[name], rtol=1e-6, atol=1e-7, err_msg=f"w{w}: {name}")
