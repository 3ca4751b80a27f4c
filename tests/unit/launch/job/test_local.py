"""Process-level guarantees: group signals, Ctrl-C to the launcher, and a SIGKILLed launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from adrun.launch.job.local import LocalProcess
from adrun.launch.job.teardown import leftover_processes

pytestmark = pytest.mark.timeout(150)

# A launcher running a job of three sleeping tasks, signals handled as the CLI does; argv: sys.path
# as JSON, job id.
LAUNCHER = """
import json, os, sys
from pathlib import Path
sys.path[:] = json.loads(sys.argv[1])
from adrun.cli.interrupts import handling_interrupts
from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.supervisor import supervise
from adrun.launch.job.tasks import Task
from tests.support.job_configs import job_config

job_id = sys.argv[2]
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
env = dict(os.environ, ADRUN_JOB_ID=job_id)
tasks = [Task("ps", 0, "localhost", 0), Task("worker", 0, "localhost", 0), Task("worker", 1, "localhost", 0)]
launches = [TaskLaunch(task, sleep, env, Path.cwd()) for task in tasks]

class Say:
    def job_started(self, job_id, tasks): print("started", flush=True)
    def task_output(self, task, stream, line): pass
    def progress(self, throughput, elapsed_s): pass
    def stopping(self, reason): print(reason, flush=True)

with handling_interrupts() as interrupts, interrupts.handed_down() as interrupt:
    result = supervise(launches, job_config(job_id), Say(), interrupt=interrupt)
print("interrupted" if result.interrupted else "not interrupted", flush=True)
sys.exit(result.exit_code)
"""


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _start_launcher(job_id: str) -> subprocess.Popen:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, json.dumps(sys.path), job_id], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout.readline().strip() == "started"
    assert _wait_for(lambda: len(leftover_processes(job_id)) == 3, 60), "the job's tasks never appeared"
    return launcher


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_or_sigterm_to_the_launcher_stops_the_job_with_exit_130(job_id, signum):
    launcher = _start_launcher(job_id)

    launcher.send_signal(signum)
    out, _ = launcher.communicate(timeout=60)  # a hang guard: the tasks would sleep for 10 minutes

    assert launcher.returncode == 130
    assert out.splitlines() == ["interrupted: stopping all tasks", "interrupted"]
    assert leftover_processes(job_id) == []


def test_tasks_die_with_a_sigkilled_launcher(job_id):
    launcher = _start_launcher(job_id)
    tasks = leftover_processes(job_id)

    launcher.kill()
    launcher.wait(timeout=5)

    # a bound for a busy machine, not a speed claim: the tasks end when they notice the launcher is gone
    assert _wait_for(lambda: leftover_processes(job_id) == [], 60), "tasks outlived their launcher"
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in tasks)


def test_group_signals_reach_what_a_task_started(tmp_path):
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(child.pid, flush=True); time.sleep(600)"
    )
    proc = LocalProcess([sys.executable, "-c", code], cwd=tmp_path, env=os.environ)
    grandchild = psutil.Process(int(proc.stdout.readline()))
    assert os.getpgid(grandchild.pid) == proc.pid

    proc.terminate_group()

    assert _wait_for(lambda: not proc.group_alive(), 30)
    assert proc.poll() == -signal.SIGTERM
    assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE
    proc.stdout.close()
    proc.stderr.close()


def test_the_release_pipe_reaches_the_task_and_a_release_after_its_end_is_harmless(tmp_path):
    """The task reads its release pipe (ADRUN_RELEASE_FD) to the end; a second task that ended
    without reading is released all the same (the pipe's reader is gone: nothing to tell)."""
    reader = "import os; print(os.read(int(os.environ['ADRUN_RELEASE_FD']), 100))"
    waiting = LocalProcess([sys.executable, "-c", reader], cwd=tmp_path, env=os.environ, release=True)
    gone = LocalProcess([sys.executable, "-c", "pass"], cwd=tmp_path, env=os.environ, release=True)
    assert gone.wait(timeout=60) == 0
    for proc in (waiting, gone):
        proc.release()
        proc.release()  # once is what counts
    out, _ = waiting.communicate(timeout=60)
    assert (out, waiting.poll()) == (b"b'release\\n'\n", 0)
    plain = LocalProcess([sys.executable, "-c", "import os; print(os.environ.get('ADRUN_RELEASE_FD'))"],
                         cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "ADRUN_RELEASE_FD"})
    assert plain.communicate(timeout=60)[0] == b"None\n"


def test_a_launcher_without_stdin_still_gives_the_task_a_working_release_pipe(tmp_path):
    """With its stdin closed, the launcher's new pipe would be numbered 0, which the task's own
    stdin (/dev/null) replaces: the task would read its release at once. Its ends are moved above 2."""
    launcher = (
        "import os, sys\n"
        "os.close(0)\n"
        "from adrun.launch.job.local import LocalProcess\n"
        "reader = \"import os; fd = int(os.environ['ADRUN_RELEASE_FD']); print(fd > 2, os.read(fd, 100))\"\n"
        "task = LocalProcess([sys.executable, '-c', reader], cwd='.', env=os.environ, release=True)\n"
        "task.release()\n"
        "sys.stdout.buffer.write(task.communicate(timeout=60)[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", launcher], cwd=tmp_path, capture_output=True, timeout=120)
    assert (done.stdout, done.returncode) == (b"True b'release\\n'\n", 0), done.stderr
