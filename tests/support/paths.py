"""Where the repository and the test scripts are, for tests that run adrun or read files of the tree."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"
TINY = str(SCRIPTS / "tiny_model.py")  # the small graph-mode model most job tests train
