"""A SIGTERM that ends a benchmark's run through its `finally` blocks and context managers.

Python's default SIGTERM action ends the process at once: no `finally` runs, so namespace hosts
(NetnsCluster.__exit__), tc qdiscs and child processes started in sessions of their own outlive a
run stopped by `timeout 900 ...`, the documented way to bound one. Inside `sigterm_exits()` a
SIGTERM raises SystemExit(128 + 15) instead, so the run unwinds and exits with the code a shell
reports for a process ended by SIGTERM.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """Within the block a SIGTERM raises SystemExit(143); the previous handler is restored after it.
    Only the main thread can install a handler (signal.signal raises ValueError elsewhere)."""
    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
