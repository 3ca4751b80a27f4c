"""Fixtures every test may use: adrun's records and homes kept apart from the user's, local
cluster specs, and adrun started in the background. Their logic lives in tests/support/."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.adrun_cli import write_spec
from tests.support.live_jobs import LiveAdrun, live_jobs


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
def spec_file(tmp_path: Path) -> Callable[..., Path]:
    """A factory for local cluster specs in the test's temporary directory."""

    def make(workers: int = 2, ps: int = 1, **node_fields: object) -> Path:
        return write_spec(tmp_path / f"cluster-{workers}w{ps}ps.yml", workers, ps, **node_fields)

    return make


@pytest.fixture
def live() -> Iterator[Callable[..., LiveAdrun]]:
    """`live(*args, env=...)` starts adrun in the background (tests/support/live_jobs.py); every job
    started is killed with its leftovers at the end."""
    yield from live_jobs()
