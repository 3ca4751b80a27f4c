"""The child processes of one benchmark run: started together, waited for on one deadline, ended together.

A benchmark's workers (and PS tasks) wait for each other: one that fails, or a PS that ends, leaves
the rest blocked in collectives or PS calls until a deadline, so the run ends as soon as any child
fails. Whatever way the run ends (success, a failure, its deadline, an exception, Ctrl-C, and a
SIGTERM, e.g. from `timeout 900 ...`) every child is stopped before the block is left: each
runs in a session of its own, so its whole process group gets the stop signal, then SIGKILL after
a grace period, and descendants that left the group (psutil sees them while their parent lives)
are killed too. Children in sessions of their own do not see a terminal's Ctrl-C: the parent's
KeyboardInterrupt stops them. Within the block a SIGTERM raises SystemExit(143)
(bench/sigterm.py) unless the program installed its own SIGTERM handler (bench.cluster.run turns it
into Ctrl-C's path), which is left alone.
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.sigterm import sigterm_exits


class Role(enum.Enum):
    """What a child's end means to the run."""

    WAITED = "waited"  # the run waits for it to end; a nonzero exit fails the run
    SERVER = "server"  # it runs until the run stops it (a PS task's server): ending at all fails the run
    BESIDE = "beside"  # not waited for (it ends on its own or is stopped); a nonzero exit fails the run


@dataclass
class Child:
    """A process the run started, its name in messages and the file its output goes to."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path | None
    role: Role
    stop_signal: signal.Signals
    stopped: bool = False


@dataclass(frozen=True)
class Failure:
    """Why a run's wait ended early: `child` failed with `code`, or (code None) it still ran at the
    deadline; `codes` are every child's exit codes then (None: running)."""

    child: Child
    code: int | None
    timeout_s: float
    codes: dict[str, int | None]

    def __str__(self) -> str:
        codes = ", ".join(f"{name} {code}" for name, code in self.codes.items())
        if self.code is None:
            running = [name for name, code in self.codes.items() if code is None]
            what = f"the run passed its deadline of {self.timeout_s:.0f} s with {', '.join(running)} still running"
        elif self.child.role is Role.SERVER:
            what = f"{self.child.name} exited ({self.code}) before the others finished"
        else:
            what = f"{self.child.name} failed (exit code {self.code})"
        log = f"; its output: {self.child.log}" if self.child.log else ""
        return f"{what} (exit codes: {codes}){log}"


class Children:
    """Use as a context manager: `start` children, `wait` for them; leaving the block stops every
    child still running (and what is left of its process group)."""

    def __init__(self, grace_s: float = 10.0) -> None:
        self.grace_s = grace_s
        self.children: list[Child] = []
        self._stack = ExitStack()

    def __enter__(self) -> Children:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self._stack.enter_context(sigterm_exits())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self._stack.close()

    def start(self, name: str, argv: Sequence[str], *, log: Path | None = None, role: Role = Role.WAITED,
              stop_signal: signal.Signals = signal.SIGTERM, **popen: Any) -> Child:
        """Starts `argv` in a session of its own, its stdout and stderr into `log` when given (else
        as `popen` says; stdin is /dev/null unless it says otherwise). `stop_signal` is what its
        group gets first when the run stops it (adrun's teardown runs on SIGINT)."""
        if any(c.name == name for c in self.children):
            raise ValueError(f"a child named {name!r} was started already")
        popen.setdefault("stdin", subprocess.DEVNULL)
        if log is None:
            proc = subprocess.Popen(list(argv), start_new_session=True, **popen)
        else:
            with log.open("wb") as out:
                proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen)
        self.children.append(Child(name, proc, log, role, stop_signal))
        return self.children[-1]

    def wait(self, timeout_s: float, poll_s: float = 0.05) -> Failure | None:
        """None once every waited child has ended well; else the first failure, as soon as it is
        seen (within `poll_s`; Popen.wait polls as often): a waited child's nonzero exit; while any
        still runs, a server's end or another child's nonzero exit; or the deadline (`timeout_s`
        from now), naming a waited child still running."""
        end = time.monotonic() + timeout_s
        waited = [c for c in self.children if c.role is Role.WAITED]
        others = [c for c in self.children if c.role is not Role.WAITED]
        while True:
            codes = {c.name: c.proc.poll() for c in self.children}
            if failed := next((c for c in waited if codes[c.name]), None):
                return Failure(failed, codes[failed.name], timeout_s, codes)
            if all(codes[c.name] is not None for c in waited):
                return None
            if ended := next((c for c in others if _fails(c.role, codes[c.name])), None):
                return Failure(ended, codes[ended.name], timeout_s, codes)
            if time.monotonic() > end:
                late = next(c for c in waited if codes[c.name] is None)
                return Failure(late, None, timeout_s, codes)
            time.sleep(poll_s)

    def stop(self) -> None:
        """Ends every child and its process group: the stop signal, then after `grace_s` SIGKILL to
        what is left, including descendants that left the group. Children that ended keep their
        codes; a child is stopped once (a second call leaves it alone)."""
        mine = [c for c in self.children if not c.stopped]
        descendants = list(_descendants(c.proc.pid for c in mine if c.proc.poll() is None))
        for child in mine:
            if child.proc.poll() is None:
                _signal_group(child.proc.pid, child.stop_signal)
        end = time.monotonic() + self.grace_s
        for child in mine:
            try:
                child.proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for child in mine:  # also a group whose leader ended before its members
            _signal_group(child.proc.pid, signal.SIGKILL)
            child.stopped = True
        for p in _running(descendants):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        for child in mine:
            child.proc.wait()
        _wait_gone(descendants, self.grace_s)


def _fails(role: Role, code: int | None) -> bool:
    """Whether a child that is not waited for fails the run by `code` (None: running)."""
    return code is not None if role is Role.SERVER else bool(code)


def _descendants(pids: Iterable[int]) -> Iterator[psutil.Process]:
    for pid in pids:
        try:
            yield from psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone (PermissionError: macOS's answer for a group of zombies)


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` still running; a zombie counts as ended (an orphan's is reaped by init, which
    in a container may never do it)."""
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_gone(procs: list[psutil.Process], timeout_s: float, poll_s: float = 0.05) -> None:
    end = time.monotonic() + timeout_s
    while _running(procs) and time.monotonic() < end:
        time.sleep(poll_s)
