"""Where the repository and the test scripts are, for tests that run adrun or read files of the tree."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"
TINY = str(SCRIPTS / "tiny_model.py")  # the small graph-mode model most job tests train


def files_under(path: Path) -> list[Path]:
    """Every file below `path`, sorted (none when it does not exist): what a run left behind."""
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []
