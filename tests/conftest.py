"""Shared helpers: run the adrun CLI as a user would, and write small cluster specs."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "scripts"


@dataclass
class AdrunResult:
    returncode: int
    stdout: str
    stderr: str
    job_id: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_adrun(*args: str, job_id: str | None = None, timeout: float = 300, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> AdrunResult:
    """`adrun [--job-id ID] ARGS...` in a subprocess, as a user would type it."""
    job_id = job_id or f"test-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "adrun", *args]
    if args and args[0] not in ("strategy", "cluster", "profile", "jobs", "stop", "logs"):
        argv = [sys.executable, "-m", "adrun", "--job-id", job_id, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd or REPO,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    return AdrunResult(proc.returncode, proc.stdout, proc.stderr, job_id)


def write_spec(path: Path, workers: int = 2, ps: int = 1, **node_fields) -> Path:
    extra = "".join(f"    {k}: {v}\n" for k, v in node_fields.items())
    path.write_text(f"version: 1\nnodes:\n  - address: localhost\n    chief: true\n    workers: {workers}\n    ps: {ps}\n{extra}")
    return path


@pytest.fixture(scope="session", autouse=True)
def adrun_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every adrun the tests start records its jobs here (ADRUN_HOME), not in the user's ~/.adrun."""
    home = tmp_path_factory.mktemp("adrun-home")
    os.environ["ADRUN_HOME"] = str(home)
    return home
@pytest.fixture(autouse=True)
def records_db(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's adrun runs record into a database of their own (ADRUN_RECORDS), never into the
    user's ~/.adrun, in a directory apart from tmp_path so a test's own files stay its own."""
    path = tmp_path_factory.mktemp("records") / "records.sqlite"
    monkeypatch.setenv("ADRUN_RECORDS", str(path))
    return path


@pytest.fixture
def spec_file(tmp_path: Path):
    """A factory for local cluster specs in the test's temporary directory."""

    def make(workers: int = 2, ps: int = 1, **node_fields) -> Path:
        return write_spec(tmp_path / f"cluster-{workers}w{ps}ps.yml", workers, ps, **node_fields)

    return make
