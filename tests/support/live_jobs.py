"""adrun started in the background and watched while it runs: its output line by line, the
processes of its job, and the wait until none is left. Jobs are stopped by the test's own events;
GUARD_S only keeps a broken adrun from hanging the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from adrun.launch.job.teardown import kill_leftovers, leftover_processes
from tests.support.adrun_cli import new_job_id
from tests.support.paths import REPO

GUARD_S = 120.0  # a hang guard, never a claim about speed


class LiveAdrun:
    """adrun in its own session (so only the signals a test sends reach it), output collected live."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.job_id = new_job_id()
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "adrun", "--job-id", self.job_id, *args],
            cwd=REPO, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()

    @property
    def output(self) -> str:
        with self._seen:
            return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout_s: float = 120) -> str:
        """The first output line matching `pattern` (a regex), waiting for it to appear."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with self._seen:
            while True:
                for line in self.lines:
                    if regex.search(line):
                        return line
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, f"no line matching {pattern!r}:\n" + "\n".join(self.lines)
                self._seen.wait(min(left, 0.5))

    def wait_for_file(self, path: Path) -> None:
        """Until `path` exists; fails as soon as adrun has ended without it."""
        while not path.exists():
            assert self.proc.poll() is None, f"adrun ended before {path.name} appeared:\n{self.output}"
            self._reader.join(0.1)

    def wait(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=5)
        return code

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        kill_leftovers(self.job_id)


def live_jobs() -> Iterator[Callable[..., LiveAdrun]]:
    """The `live` fixture's body: yields `start(*args, env=...) -> LiveAdrun`; every job started
    is killed with its leftovers afterwards."""
    started: list[LiveAdrun] = []

    def start(*args: str, env: dict[str, str] | None = None) -> LiveAdrun:
        job = LiveAdrun(*args, env=env)
        started.append(job)
        return job

    yield start
    for job in started:
        job.cleanup()


def wait_no_leftovers(job_id: str, timeout_s: float) -> float:
    """Seconds until no process of `job_id` is left; fails after `timeout_s`."""
    start = time.monotonic()
    while leftover_processes(job_id):
        assert time.monotonic() - start < timeout_s, [p.info for p in leftover_processes(job_id)]
        time.sleep(0.1)
    return time.monotonic() - start


def job_processes(job_id: str, role: str) -> list[psutil.Process]:
    """The task processes (not their keepers) of `role` in job `job_id`."""
    return [p for p in leftover_processes(job_id) if p.info["environ"].get("ADRUN_ROLE") == role]


def job_process(job_id: str, role: str, index: int) -> psutil.Process:
    """The one task process of `role` `index` in job `job_id`."""
    [proc] = [p for p in job_processes(job_id, role) if p.info["environ"].get("ADRUN_TASK_INDEX") == str(index)]
    return proc
