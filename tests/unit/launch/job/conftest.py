"""Fixtures of the unit tests that supervise hand-made `python -c` jobs (tests/support/supervision.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.tasks import Task
from adrun.launch.job.teardown import kill_leftovers
from tests.support.adrun_cli import new_job_id
from tests.support.supervision import python_task


@pytest.fixture
def job_id() -> Iterator[str]:
    """A job id of the test's own; whatever of that job is left at the end is killed."""
    job = new_job_id()
    yield job
    kill_leftovers(job)


@pytest.fixture
def make(job_id: str, tmp_path: Path) -> Callable[[str, int, str], TaskLaunch]:
    """make(role, index, code) -> a TaskLaunch running `python -c code` under the env contract, in a
    cluster of one PS and two workers."""
    cluster = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}

    def _make(role: str, index: int, code: str) -> TaskLaunch:
        return python_task(Task(role, index, "localhost", 0), job_id, code, tmp_path, cluster, num_workers=2)

    return _make
