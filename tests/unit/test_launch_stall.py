"""The stall warning: a worker whose step count stops moving is named, once per stall, not killed."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid

import pytest

from adrun.launch.env import task_env
from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.supervisor import supervise
from adrun.launch.job.tasks import Task
from adrun.launch.job.teardown import kill_leftovers

pytestmark = pytest.mark.timeout(60)


class Listener:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def job_started(self, job_id, tasks): pass
    def task_output(self, task, stream, line): pass
    def progress(self, throughput, elapsed_s): pass
    def stopping(self, reason): pass

    def warning(self, message):
        self.warnings.append(message)


def _worker(job_id: str, tmp_path, index: int, code: str) -> TaskLaunch:
    task = Task("worker", index, "localhost", 0)
    env = task_env(task, job_id, 2, {"worker": ["localhost:1", "localhost:2"]}, "run", None, str(tmp_path), os.environ)
    env.pop("ADRUN_MODE")
    return TaskLaunch(task, [sys.executable, "-c", textwrap.dedent(code)], env, tmp_path)


def test_a_stalled_worker_is_named_once_and_the_stepping_one_never(tmp_path):
    job_id = f"test-{uuid.uuid4().hex[:12]}"
    stepping = """
        import json, sys, time
        for step in range(1, 9):
            print("@@ADRUN " + json.dumps({"event": "step", "step": step, "time": time.time()}), file=sys.stderr, flush=True)
            time.sleep(0.5)
    """
    stalled = """
        import json, sys, time
        print("@@ADRUN " + json.dumps({"event": "step", "step": 1, "time": time.time()}), file=sys.stderr, flush=True)
        time.sleep(4.5)
    """
    listener = Listener()
    try:
        result = supervise([_worker(job_id, tmp_path, 0, stepping), _worker(job_id, tmp_path, 1, stalled)],
                           job_id, listener, stall_timeout_s=2.0)
    finally:
        kill_leftovers(job_id)
    assert result.exit_code == 0
    assert len(listener.warnings) == 1, listener.warnings
    assert listener.warnings[0].startswith("w1 (worker 1 on localhost) has made no training progress for ")
    assert "still at step 1" in listener.warnings[0]
