"""Fixtures of the integration tests that run adrun's profiling run in the test process."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The profiling run's temporary directories go here, to see that none is left."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp
