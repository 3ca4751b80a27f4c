"""Watching processes a test's subject started: whether they are gone, files they write when ready."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import psutil

GUARD_S = 120.0  # a hang guard, never a claim about speed


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie (an orphan's may wait long for init to reap it, forever
    where init does not reap: this machine's does not)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_left(pids: Iterable[int]) -> None:
    """SIGKILL to those of `pids` still running (a failed test's leftovers)."""
    for pid in pids:
        if not gone(pid):
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def wait_for_files(*paths: Path, while_running: subprocess.Popen | None = None) -> None:
    """Until each of `paths` exists (its writer renames it into place, so it is complete); fails
    when `while_running` ends first."""
    end = time.monotonic() + GUARD_S
    while not all(p.exists() for p in paths):
        assert time.monotonic() < end, f"never written: {[str(p) for p in paths if not p.exists()]}"
        assert while_running is None or while_running.poll() is None, "the process ended before writing them"
        time.sleep(0.02)


def assert_signal_leaves_no_child(parent: subprocess.Popen, sig: int, code: int, ready: Sequence[Path],
                                  read_pids: Callable[[], list[int]]) -> None:
    """Once `parent` has written `ready` (its children are up), send it `sig` alone: it must exit
    with `code` and every child `read_pids` names must be gone. Whatever is left is killed."""
    pids: list[int] = []
    try:
        wait_for_files(*ready, while_running=parent)
        pids = read_pids()
        parent.send_signal(sig)
        assert parent.wait(timeout=GUARD_S) == code
        assert [pid for pid in pids if not gone(pid)] == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        kill_left(pids)
