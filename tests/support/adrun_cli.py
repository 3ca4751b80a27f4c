"""Running the adrun CLI as a user would, writing small local cluster specs, and reading its
rich output as plain words."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

# commands that take no --job-id (everything else is `adrun [run]`)
_NO_JOB_ID = ("strategy", "cluster", "profile", "jobs", "stop", "logs")


@dataclass
class AdrunResult:
    returncode: int
    stdout: str
    stderr: str
    job_id: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def new_job_id() -> str:
    """A job id of its own for one test, so leftovers can be swept by it."""
    return f"test-{uuid.uuid4().hex[:12]}"


def run_adrun(*args: str, job_id: str | None = None, timeout: float = 300, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> AdrunResult:
    """`adrun [--job-id ID] ARGS...` in a subprocess, as a user would type it."""
    job_id = job_id or new_job_id()
    argv = [sys.executable, "-m", "adrun", *args]
    if args and args[0] not in _NO_JOB_ID:
        argv = [sys.executable, "-m", "adrun", "--job-id", job_id, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd or REPO,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    return AdrunResult(proc.returncode, proc.stdout, proc.stderr, job_id)


def write_spec(path: Path, workers: int = 2, ps: int = 1, **node_fields: object) -> Path:
    """A spec of this machine alone (`localhost`, the chief) with `workers` workers and `ps` PS tasks."""
    extra = "".join(f"    {k}: {v}\n" for k, v in node_fields.items())
    path.write_text(f"version: 1\nnodes:\n  - address: localhost\n    chief: true\n    workers: {workers}\n    ps: {ps}\n{extra}")
    return path


def flat(text: str) -> str:
    """Output without rich's box characters and line wrapping: words separated by single spaces."""
    return " ".join(re.sub(r"[│╭╮╰╯─┃━┏┓┗┛┡┩├┼┤]", " ", text).split())
