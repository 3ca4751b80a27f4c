"""What a task tells its launcher: the task -> launcher half of the contract, as typed events.

A task reports its training steps (`StepEvent`), a step that has been running for a while
(`WaitingEvent`), that it ran its last step of a bounded run and waits at the finish barrier
(`FinishedEvent`), that adrun's hook wrote what it was asked for and ended the script
(`DoneEvent`, capture and profile mode), that it wrote the graph and waits to be told whether to
profile (`CapturedEvent`, a first start's one process for both), an exception nothing caught (`ErrorEvent`) and a refusal
by the hook (`RefusalEvent`). `encode` is the one writer (the runtime, in every task), `decode`
the one reader (the supervisor, capture and profile on the launching machine); nothing decides
anything from the rest of a task's output, which is only shown.

The channel is one line per event, `@@ADRUN {json}`, on the task's stderr, not a file per task
(torchelastic's error file). Why: stderr already reaches the launcher from every task, by every
path a task is started on: a local pipe, the keeper's channel over SSH for a task on another node
(`launch/job/remote.py` streams it back line by line, with no file to fetch from that node and
nothing left there to clean up), and the captured output of a capture or profile process. The
events also stay in order with the output around them, so the error a task reports is the one of
the traceback just above it. What a line cannot carry, no file could either: a task killed by a
signal writes neither, and its exit status says what happened.

This module imports nothing but the standard library: every task imports it.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

EVENT_PREFIX = "@@ADRUN "
MESSAGE_CHARS = 2000  # an exception's or a refusal's message is cut here: a line, not a log


@dataclass(frozen=True)
class StepEvent:
    """This worker has run `step` training steps in this attempt (at most ~2 reports a second,
    one within 0.5 s of the last step when it goes quiet, and one at exit)."""

    kind: ClassVar[str] = "step"
    step: int
    time: float  # the worker's wall clock
    examples: int | None = None  # examples per step, when the worker can tell its batch size
    wire_bytes: int = 0  # bytes per step this worker hands to dense all-reduces


@dataclass(frozen=True)
class WaitingEvent:
    """The worker's training step `step + 1`, begun at `since`, was still running at `time`
    (sent once per step, after `metrics.WAITING_AFTER_S`): it waits for a peer or a PS."""

    kind: ClassVar[str] = "waiting"
    step: int
    time: float
    since: float


@dataclass(frozen=True)
class FinishedEvent:
    """The worker ran its `step`-th and last training step of a bounded run (ADRUN_MAX_STEPS) and
    now waits, its server up, for the launcher to release it on its release pipe
    (`TaskContext.release_fd`) once every worker has finished or exited (adrun/runtime/finish.py)."""

    kind: ClassVar[str] = "finished"
    step: int


@dataclass(frozen=True)
class DoneEvent:
    """adrun's hook wrote what the process was started for (capture: the GraphItem; profile: the
    samples) to `wrote`, ADRUN_CAPTURE_OUT."""

    kind: ClassVar[str] = "done"
    wrote: str


@dataclass(frozen=True)
class CapturedEvent:
    """Profile mode asked to wait at the capture point (`TaskContext.capture_answer_fd`): adrun's
    hook wrote the GraphItem to `wrote`, ADRUN_CAPTURE_OUT, where capture mode would have ended the
    script, and waits for the launcher's `task_context.AfterCapture`."""

    kind: ClassVar[str] = "captured"
    wrote: str


@dataclass(frozen=True)
class ErrorEvent:
    """An exception nothing in the task caught, reported by the runtime's excepthook.

    `tf_error` is the `tf.errors` class TensorFlow gave it (`UnavailableError`, `AbortedError`,
    `DeadlineExceededError`, ... from its error code, whatever subclass was raised), decided in
    the task where the exception object exists; None for an exception that is no TF OpError."""

    kind: ClassVar[str] = "error"
    exception: str  # its class, qualified by its module unless a builtin: `ValueError`, `pkg.mod.Error`
    message: str
    tf_error: str | None = None

    @property
    def name(self) -> str:
        """The class without its module: `UnavailableError`."""
        return self.exception.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class RefusalEvent:
    """adrun's hook refused the script (its graph is not the one planned, or cannot be
    distributed); the process exits PLAN_MISMATCH_EXIT_CODE after it. The same message is shown
    on stderr as an `adrun: error:` line for whoever reads the output."""

    kind: ClassVar[str] = "refusal"
    message: str


TaskEvent = StepEvent | WaitingEvent | FinishedEvent | DoneEvent | CapturedEvent | ErrorEvent | RefusalEvent
_KINDS: dict[str, type[TaskEvent]] = {cls.kind: cls for cls in typing.get_args(TaskEvent)}


def encode(event: TaskEvent) -> str:
    """The line (with its newline) that carries `event` to the launcher."""
    return EVENT_PREFIX + json.dumps({"event": event.kind, **asdict(event)}) + "\n"


def decode(line: str) -> TaskEvent | None:
    """The event of an event line; None for any other line, and for a malformed event line
    (unknown kind, a field missing or of the wrong type), which is then shown like ordinary
    output rather than silently dropped."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        data = json.loads(line[len(EVENT_PREFIX):])
    except ValueError:
        return None
    kind = data.get("event") if isinstance(data, dict) else None
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return None
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            continue  # a default, or a TypeError below
        if not _fits(data[f.name], _FIELD_TYPES[cls][f.name]):
            return None
        values[f.name] = float(data[f.name]) if _FIELD_TYPES[cls][f.name] is float else data[f.name]
    try:
        return cls(**values)
    except TypeError:  # a required field is missing
        return None


def _fits(value: Any, hint: Any) -> bool:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


_FIELD_TYPES = {cls: typing.get_type_hints(cls) for cls in _KINDS.values()}
