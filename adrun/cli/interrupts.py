"""Ctrl-C and SIGTERM (what `adrun stop` sends) to the launcher: one handler for both, installed
once by the command (`handling_interrupts`), and an event handed down to whatever stops a job.

What a signal does depends on where the command is:
  - before a job runs (capturing, connecting): KeyboardInterrupt, so the command unwinds through
    the `finally` blocks of what it started and exits 130 (`options.user_errors`);
  - while a job runs (`INTERRUPTS.handed_down()`): the event is set, and the supervisor and the
    restart loop, which wait on it, stop the job in order (its result says interrupted, exit 130);
  - once the job's end is being recorded (`INTERRUPTS.ignore()`): nothing, so the record's last
    write is not cut short (the job would then show as lost).
Only the main thread can handle signals; elsewhere nothing is installed and the event is never set
by one. Signals are the process's, so there is one `INTERRUPTS`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from types import FrameType
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Mode(Enum):
    RAISE = "raise"
    SET = "set"
    IGNORE = "ignore"


class Interrupts:
    """The launcher's interrupt: a signal's effect now, and the event a running job waits on."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._mode = _Mode.RAISE

    @contextmanager
    def handed_down(self) -> Iterator[threading.Event]:
        """While the block runs a job, a signal sets the returned event instead of raising."""
        if self._mode is _Mode.RAISE:
            self._mode = _Mode.SET
        try:
            yield self.event
        finally:
            if self._mode is _Mode.SET:
                self._mode = _Mode.RAISE

    def ignore(self) -> None:
        """From now on until the handler is removed, signals do nothing."""
        self._mode = _Mode.IGNORE

    def reset(self) -> None:
        """As before any signal: for the next command run in this process (tests run many)."""
        self.event.clear()
        self._mode = _Mode.RAISE

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._mode is _Mode.IGNORE:
            return
        self.event.set()
        if self._mode is _Mode.RAISE:
            raise KeyboardInterrupt


INTERRUPTS = Interrupts()


@contextmanager
def handling_interrupts() -> Iterator[Interrupts]:
    """SIGINT and SIGTERM handled by `INTERRUPTS` within the block (in the main thread), the
    previous handlers restored after it, and the interrupt cleared for the next command."""
    INTERRUPTS.reset()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, INTERRUPTS.on_signal) for sig in _SIGNALS}
    try:
        yield INTERRUPTS
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        INTERRUPTS.reset()
