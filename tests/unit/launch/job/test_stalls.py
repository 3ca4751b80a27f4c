"""The stall warning: a worker whose step count stops moving is named, once per stall, not killed."""

from __future__ import annotations


import pytest

from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.supervisor import supervise
from adrun.launch.job.tasks import Task
from adrun.launch.job.teardown import kill_leftovers
from tests.support.adrun_cli import new_job_id
from tests.support.job_configs import job_config
from tests.support.supervision import Recorder, python_task

pytestmark = pytest.mark.timeout(60)


class Listener(Recorder):
    """Records, and touches `warned` at the first warning: the workers end on that event."""

    def __init__(self, warned) -> None:
        super().__init__()
        self.warned = warned

    def warning(self, message):
        super().warning(message)
        self.warned.touch()


def _worker(job_id: str, tmp_path, index: int, code: str) -> TaskLaunch:
    return python_task(Task("worker", index, "localhost", 0), job_id, code, tmp_path,
                       {"worker": ["localhost:1", "localhost:2"]}, num_workers=2)


def test_a_stalled_worker_is_named_once_and_the_stepping_one_never(tmp_path):
    """w1 takes one step once w0 steps (so neither is waited for at start-up), then stands still until
    the warning came; w0 steps every 0.1 s until then, and a few steps more."""
    job_id = new_job_id()
    stepping_file, warned = tmp_path / "w0-stepping", tmp_path / "warned"
    stepping = f"""
        import json, pathlib, sys, time
        def step(n):
            print("@@ADRUN " + json.dumps({{"event": "step", "step": n, "time": time.time()}}), file=sys.stderr, flush=True)
        step(1)
        pathlib.Path({str(stepping_file)!r}).touch()
        n = 1
        while not pathlib.Path({str(warned)!r}).exists() or n < 5:
            time.sleep(0.1)
            n += 1
            step(n)
    """
    stalled = f"""
        import json, pathlib, sys, time
        while not pathlib.Path({str(stepping_file)!r}).exists():
            time.sleep(0.05)
        print("@@ADRUN " + json.dumps({{"event": "step", "step": 1, "time": time.time()}}), file=sys.stderr, flush=True)
        while not pathlib.Path({str(warned)!r}).exists():
            time.sleep(0.05)
    """
    listener = Listener(warned)
    try:
        result = supervise([_worker(job_id, tmp_path, 0, stepping), _worker(job_id, tmp_path, 1, stalled)],
                           job_config(job_id, stall_timeout_s=2.0), listener)
    finally:
        kill_leftovers(job_id)
    assert result.exit_code == 0
    assert len(listener.warnings) == 1, listener.warnings
    assert listener.warnings[0].startswith("w1 (worker 1 on localhost) has made no training progress for ")
    assert "still at step 1" in listener.warnings[0]
