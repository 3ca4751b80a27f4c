"""What the supervisor keeps of one task's output: the tails a failure shows, the task's log
file, TensorFlow's start-up noise folded into a count, and the task's events taken out.

A task's stderr carries its events (`adrun.task_events`) between its own lines; an event is
decoded here and never shown or logged. Everything else is the task's output: kept in a tail,
written to the log, and shown unless the job is quiet or the line is folded noise (`tf_noise`);
a Keras progress bar is shown as its final state, condensed to a line per epoch for a non-chief
worker unless `show_noise` (`progress_bars`).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TextIO

from adrun.task_events import TaskEvent, decode

from .progress_bars import ProgressBars, on_screen
from .results import Stream
from .tf_noise import NoiseFilter

TAIL_LINES = 20
OUTPUT_TAIL_LINES = 5


def open_log(log_dir: Path | None, label: str, attempt: int) -> TextIO | None:
    """The task's `<label>.log` in `log_dir` (None: no log), appended to by a later attempt."""
    if log_dir is None:
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"{label}.log", "a" if attempt else "w", encoding="utf-8", buffering=1)
    if attempt:
        log.write(f"--- adrun: attempt {attempt} (ADRUN_RESTART_COUNT={attempt}) ---\n")
    return log


class TaskOutput:
    """One task's two streams as they arrive; `quiet` shows nothing, `show_noise` shows the
    start-up noise instead of counting it, and every worker's progress bars as the chief's."""

    def __init__(self, log: TextIO | None, *, chief: bool, quiet: bool, show_noise: bool) -> None:
        self.log = log
        self.bars = ProgressBars(chief, show_all=show_noise)
        self.quiet = quiet
        self.show_noise = show_noise
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)  # stderr, noise left out
        self.stdout_tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self.open_streams = 2
        self._noise = NoiseFilter()
        self._folded = 0  # noise lines not shown since the task's last shown line

    def read(self, stream: Stream, line: str) -> TaskEvent | list[str]:
        """Take one line: an event the task reported, or the lines to show for it (maybe none)."""
        if stream == "stderr":
            event = decode(line)
            if event is not None:
                return event
            noise = self._noise.is_noise(line)
            if not noise:
                self.tail.append(line)
        else:
            noise = False
            self.stdout_tail.append(on_screen(line))  # a progress bar as it was left, not its redraws
        if self.log:
            self.log.write(line + "\n")
        if noise and not self.show_noise:
            self._folded += 1
            return []
        return [] if self.quiet else self.bars.shown(line)

    def folded(self) -> int:
        """How many noise lines went unshown since last asked (0 when quiet); the count restarts."""
        count, self._folded = (0 if self.quiet else self._folded), 0
        return count

    def close(self) -> None:
        if self.log:
            self.log.close()
