"""A profiling process's pause at the capture point: the capture and the profile in one start.

A first start under Auto needs the script's graph (its fingerprint names a remembered plan) and,
unless a plan is remembered, a profile of its steps. Both come from running the script up to the
same point, so the launcher starts it once, in profile mode with a pipe to answer on
(`TaskContext.capture_answer_fd`). Where capture mode would write the GraphItem and end the script
(graph mode: a Session created on a training graph, or the first training step of a Session made
before its model; TF2: once all applies of the first step are known), the profilers call
`CapturePoint.reached`: the GraphItem is written, `CapturedEvent` reported, and the process waits
for the launcher's `AfterCapture`. STOP ends it there, as capture would have; PROFILE lets it go
on training and timing steps. Without a pipe (`adrun profile`) the point is passed unnoticed.

This module imports no TensorFlow: the caller describes its graph when asked to.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from adrun.exit_codes import HOOK_DONE_EXIT_CODE
from adrun.graph_item import GraphItem, save_graph_item
from adrun.runtime.reporting import report
from adrun.task_context import AfterCapture
from adrun.task_events import CapturedEvent

_ANSWER_BYTES = 64  # an answer is one short line


class CapturePoint:
    """The one pause of a profiling process (see the module's docstring)."""

    def __init__(self, out_path: str, answer_fd: int | None) -> None:
        self._out = out_path
        self._answer_fd = answer_fd

    def reached(self, describe: Callable[[], GraphItem]) -> bool:
        """The script is where capture would end it: the first time, with a pipe to answer on, write
        `describe()`, report it and wait for the answer; end the process on STOP. True when it
        paused here and goes on (a step the caller was timing spans the pause: it must not count)."""
        fd, self._answer_fd = self._answer_fd, None
        if fd is None:
            return False
        save_graph_item(describe(), self._out)
        report(CapturedEvent(self._out))
        answer = AfterCapture.from_line(_read_line(fd))
        os.close(fd)
        if answer is AfterCapture.STOP:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(HOOK_DONE_EXIT_CODE)
        return True


def _read_line(fd: int) -> bytes:
    """What the launcher writes before its newline or closing the pipe (blocking: the script
    stands still meanwhile, as it must)."""
    data = b""
    while not data.endswith(b"\n") and len(data) < _ANSWER_BYTES:
        chunk = os.read(fd, _ANSWER_BYTES)
        if not chunk:
            break
        data += chunk
    return data
