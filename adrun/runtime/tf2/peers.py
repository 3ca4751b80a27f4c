"""Saying which worker a failed collective was waiting for.

A worker that ends early (fewer optimizer steps than its peers) or dies leaves the others in a
collective: TF fails it with `Socket closed` from the peer's address, or after the job's operation
timeout (ADRUN_OP_TIMEOUT) for a live but stuck peer. The traceback ends inside Keras; this adds one
line in adrun's words naming the peer and the usual cause.
"""

from __future__ import annotations

import re
import sys
from types import TracebackType

from adrun.exit_codes import ERROR_PREFIX

_PEER = re.compile(r"/job:worker/replica:\d+/task:(\d+)")


def explain(error: BaseException, task_index: int) -> str | None:
    """adrun's words for a failed collective, or None for another error."""
    import tensorflow as tf

    if not isinstance(error, (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                              tf.errors.CancelledError, tf.errors.AbortedError, tf.errors.InternalError)):
        return None
    text = str(error)
    if "ollective" not in text and "Socket closed" not in text:
        return None
    peers = sorted({int(i) for i in _PEER.findall(text)} - {task_index})
    who = f"worker {', '.join(map(str, peers))}" if peers else "another worker"
    reason = "timed out" if isinstance(error, tf.errors.DeadlineExceededError) else "failed"
    return (f"worker {task_index}: a collective with {who} {reason}: that worker ended or stopped responding "
            "during training. Every worker must run the same number of optimizer steps (the same number of "
            "batches and epochs on each).")


def report_collective_failures(task_index: int) -> None:
    """Add adrun's line after the traceback of an uncaught failed collective."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        previous(kind, error, tb)
        message = explain(error, task_index)
        if message is not None:
            sys.stderr.write(f"{ERROR_PREFIX}{message}\n")
            sys.stderr.flush()

    sys.excepthook = hook
