"""How a task tells its launcher: the one writer of task events (adrun/task_events.py, which says
why they travel on stderr), and the excepthook that reports an exception nothing caught.

Installed by the hook in every process adrun starts, before the script runs; imports nothing of
TensorFlow (a TF error is recognised only when the script has loaded TensorFlow itself).
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType

from adrun.task_events import MESSAGE_CHARS, ErrorEvent, TaskEvent, encode

_lock = threading.Lock()  # the step reporter's thread and the main thread both write


def report(event: TaskEvent) -> bool:
    """Write `event` for the launcher, on the process's original stderr (the script may have
    replaced `sys.stderr`); a closed stream loses the event, never the script. Whether it was written."""
    stream = sys.__stderr__
    if stream is None:
        return False
    with _lock:
        try:
            stream.write(encode(event))
            stream.flush()
        except (OSError, ValueError):
            return False
    return True


def error_event(error: BaseException) -> ErrorEvent:
    """`error` as the launcher's restart rule reads it: its class, its message, and the
    `tf.errors` class of a TensorFlow error (by its error code, as TF itself maps codes to classes)."""
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return ErrorEvent(name, str(error)[:MESSAGE_CHARS], _tf_error(error))


def _tf_error(error: BaseException) -> str | None:
    errors = sys.modules.get("tensorflow.python.framework.errors_impl")
    if errors is None or not isinstance(error, errors.OpError):
        return None
    try:
        return errors.exception_type_from_error_code(error.error_code).__name__
    except KeyError:  # a code TF has no class for
        return type(error).__name__


def report_uncaught_exceptions() -> None:
    """Chain an excepthook that reports the exception ending the script as an `ErrorEvent`, after
    the hook before it (Python's own prints the traceback the user reads)."""
    previous = sys.excepthook

    def excepthook(cls: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        try:
            previous(cls, error, tb)
        finally:
            report(error_event(error))

    sys.excepthook = excepthook
