"""mypy over adrun as it is installed: launch/ as adrun.launch, strategies/ as adrun.strategies.

mypy names a module after the directories it lies in and has nothing like setup.cfg's package_dir,
so checking the three source directories as they lie would type `launch/job/plan.py` as the module
`launch.job.plan` while every other module imports `adrun.launch.job.plan`: those imports would not
resolve and every type crossing the seam would be Any. This links the installed layout into
build/typecheck/adrun (a symlink for each entry of adrun/, plus launch and strategies), checks the
package found there (setup.cfg [mypy]: `mypy_path`, `packages`) and prints mypy's messages with the
source paths, so they can be opened as they are. The tree is made afresh each time: a new module
needs no step.

    .venv/bin/python tools/typecheck.py      (make lint runs it after ruff)
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent
TREE = Path("build") / "typecheck"
MAPPED = {"launch": ROOT / "launch", "strategies": ROOT / "strategies"}  # setup.cfg [options] package_dir


def link_tree() -> None:
    """build/typecheck/adrun: adrun/'s entries and the mapped packages, as relative symlinks."""
    package = ROOT / TREE / "adrun"
    shutil.rmtree(package, ignore_errors=True)
    package.mkdir(parents=True)
    entries = {p.name: p for p in (ROOT / "adrun").iterdir() if p.name != "__pycache__"}
    for name, target in {**entries, **MAPPED}.items():
        (package / name).symlink_to(Path("..", "..", "..", target.relative_to(ROOT)))


def source_path(line: str) -> str:
    """`build/typecheck/adrun/launch/env.py:3: error: ...` -> `launch/env.py:3: error: ...`."""
    path, sep, rest = line.partition(":")
    if not sep or not path.startswith(str(TREE) + "/"):
        return line
    return f"{(ROOT / path).resolve().relative_to(ROOT)}{sep}{rest}"


def main() -> int:
    os.chdir(ROOT)  # mypy prints paths relative to the working directory
    link_tree()
    out, err, status = api.run(["--config-file", str(ROOT / "setup.cfg")])
    sys.stdout.write("".join(source_path(line) for line in out.splitlines(keepends=True)))
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main())
