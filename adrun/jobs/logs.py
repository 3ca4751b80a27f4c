"""`adrun logs`: a recorded job's per-task log files (`--log-dir`), printed as the live view prints them.

Each task's file (named by the task's label: `w0.log`, `ps0.log`, `w1@10.0.0.2.log` for a task on
another node; both streams, written line by line while the job runs) is shown whole with the
label as its `[w1@10.0.0.2] ` prefix, as the live view shows it, workers first; `follow` then prints lines as they are
written, from every file as it appears, until the job's record says it ended. Files are read only,
and only those written since the job started (a log dir used again by a later job holds that
job's files).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from adrun.errors import UserError
from adrun.jobs.registry import JobRecord

_TASK_LOG = re.compile(r"(w|ps)(\d+)(?:@[^/]+)?\.log")  # the task's label: tag, and @host when remote
_FOLLOW_POLL_S = 0.25
_CLOCK_SLACK_S = 1.0  # file times and the recorded start come from different clocks' roundings

Emit = Callable[[str, str], None]  # (task label, line)


def log_dir_of(record: JobRecord) -> Path:
    """The job's log directory, or a UserError saying why there is none to read."""
    if record.log_dir is None:
        raise UserError(f"job {record.id} ran without --log-dir: its output went only to the terminal that started "
                        "it (run with --log-dir DIR to keep one file per task)")
    path = Path(record.log_dir)
    if not path.is_dir():
        raise UserError(f"job {record.id}: its log dir {path} no longer exists")
    return path


def task_logs(log_dir: Path, since: float) -> list[Path]:
    """The task log files in `log_dir` written since `since` (epoch s): workers by index, then PS."""
    found = []
    try:
        entries = list(log_dir.iterdir())
    except OSError as e:
        raise UserError(f"cannot read the log dir {log_dir}: {e.strerror or e}") from None
    for path in entries:
        match = _TASK_LOG.fullmatch(path.name)
        if match is None:
            continue
        try:
            fresh = path.is_file() and path.stat().st_mtime >= since - _CLOCK_SLACK_S
        except OSError:  # removed while we looked
            continue
        if fresh:
            found.append((match.group(1) == "ps", int(match.group(2)), path))
    return [path for _, _, path in sorted(found)]


class _Tail:
    """Complete lines appended to one file since the last read (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.tag = path.name.removesuffix(".log")
        self._file = open(path, "rb")
        self._partial = b""

    def lines(self, final: bool = False) -> Iterator[str]:
        data = self._partial + self._file.read()
        *complete, self._partial = data.split(b"\n")
        if final and self._partial:
            complete.append(self._partial)
            self._partial = b""
        for raw in complete:
            yield raw.decode("utf-8", errors="replace").rstrip("\r")

    def close(self) -> None:
        self._file.close()


def show_logs(record: JobRecord, emit: Emit, *, follow: bool = False,
              still_running: Callable[[], bool] = lambda: False) -> None:
    """Emit every line of the job's task logs; with `follow`, keep emitting new lines (and files)
    while `still_running()` says the job runs, then the last ones."""
    log_dir = log_dir_of(record)
    since = record.started.timestamp()
    tails: dict[Path, _Tail] = {}
    try:
        while True:
            running = follow and still_running()  # asked before reading, so nothing written after is missed
            for path in task_logs(log_dir, since):
                if path not in tails:
                    tails[path] = _Tail(path)
            for tail in tails.values():
                for line in tail.lines(final=not running):
                    emit(tail.tag, line)
            if not running:
                return
            time.sleep(_FOLLOW_POLL_S)
    finally:
        for tail in tails.values():
            tail.close()
