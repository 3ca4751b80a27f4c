"""Launching side of capture: run the script once in a hook mode and read back what it wrote.

Capture (`capture_graph`) stops the script where a worker would prepare its graph; profiling
(`adrun/profile/run.py`) lets it train a few steps; `CaptureThenProfile` does both in one start,
the process waiting at the capture point until the launcher has looked its plan up. All start the
script the same way, here (`ScriptProcess`), and word its failures the same way.
"""

from __future__ import annotations

import os
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from adrun.errors import UserError
from adrun.exit_codes import HOOK_DONE_EXIT_CODE
from adrun.env_vars import Settings
from adrun.graph_item import GraphItem, load_graph_item
from adrun.launch.env import HOOK_DIR, task_env
from adrun.launch.job.local import LocalProcess, worker_argv
from adrun.launch.job.process import task_pipe
from adrun.launch.job.tf_noise import NoiseFilter
from adrun.profile_samples import ProfileSamples, load_samples
from adrun.task_context import AfterCapture, Mode, Role, TaskContext
from adrun.task_events import CapturedEvent, DoneEvent, RefusalEvent, TaskEvent, decode

CAPTURE_TIMEOUT_S = 600
_NOT_CAPTURED = (f"neither created a tf.compat.v1.Session nor applied an optimizer within {CAPTURE_TIMEOUT_S} s "
                 "while adrun captured its graph")
_FAILED_BEFORE_CAPTURE = "failed before adrun captured its graph"
_TAIL_LINES = 15


def _tail(text: bytes) -> str:
    """The script's last stderr lines, without TensorFlow's start-up noise, indented to quote."""
    noise = NoiseFilter()
    lines = [line for line in text.decode(errors="replace").splitlines()
             if line.strip() and decode(line) is None and not noise.is_noise(line)]
    return "\n".join("    " + line for line in lines[-_TAIL_LINES:])


class _Streams:
    """A running process's stdout drained and its stderr kept, each event queued as its line comes
    (None at the end of stderr): the launcher must act on an event while the process still runs."""

    def __init__(self, process: LocalProcess) -> None:
        self.stderr = bytearray()
        self.events: queue.Queue[TaskEvent | None] = queue.Queue()
        self.seen: list[TaskEvent] = []
        self._threads = [threading.Thread(target=self._drain, args=(process.stdout,), daemon=True),
                         threading.Thread(target=self._read, args=(process.stderr,), daemon=True)]
        for thread in self._threads:
            thread.start()

    def _drain(self, stream: IO[bytes]) -> None:
        while stream.read(65536):
            pass

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.stderr += line
            event = decode(line.decode(errors="replace"))
            if event is not None:
                self.events.put(event)
        self.events.put(None)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()


class ScriptProcess:
    """The script started once as worker 0 of `num_workers` in a hook mode (ADRUN_MODE=`mode`),
    in a `with` block that leaves no process behind, whatever ends it (an error, Ctrl-C).

    The file the hook writes (ADRUN_CAPTURE_OUT) and the script's scratch directory
    (ADRUN_SCRATCH_DIR) are in a temporary directory deleted at the end. `profile_steps` are profile
    mode's warm-up and timed training steps; `ask`: profile mode waits where capture would end the
    script for the launcher's `AfterCapture` (`answer`), after a CapturedEvent
    (adrun/runtime/capture_point.py).
    """

    def __init__(self, script: Path, script_args: list[str], num_workers: int, job_id: str, mode: Mode, *,
                 profile_steps: tuple[int, int] = (0, 0), ask: bool = False, python: str = sys.executable) -> None:
        self.script = script
        self._argv = worker_argv(python, script, script_args)
        self._tmp = tempfile.TemporaryDirectory(prefix=f"adrun-{mode}-")
        self.out = Path(self._tmp.name) / "found.json"
        scratch = Path(self._tmp.name) / "scratch"
        scratch.mkdir()
        # The answer pipe's ends (ask). The read end stays open here too until the end, so that an
        # answer to a process that has died meanwhile is lost rather than a broken pipe.
        self._answer_read: int | None = None
        self._answer_write: int | None = None
        if ask:
            self._answer_read, self._answer_write = task_pipe()
        warmup, steps = profile_steps
        self._context = TaskContext(
            mode=mode, role=Role.WORKER, task_index=0, num_workers=num_workers, job_id=job_id, cluster={},
            capture_out=str(self.out), scratch_dir=str(scratch), profile_warmup=warmup, profile_steps=steps,
            capture_answer_fd=self._answer_read, settings=Settings.from_env(os.environ),
        )
        self._process: LocalProcess | None = None
        self._streams: _Streams | None = None
        self._code: int | None = None

    def __enter__(self) -> ScriptProcess:
        try:
            env = task_env(self._context, os.environ, hook_dir=str(HOOK_DIR))
            fds = () if self._answer_read is None else (self._answer_read,)
            self._process = LocalProcess(self._argv, cwd=Path.cwd(), env=env, pass_fds=fds)
            self._streams = _Streams(self._process)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """A process still waiting for its answer is told to stop (the end of the pipe says so, as it
        would if the launcher died); any process of its group left is killed, and waited for."""
        self._close()

    def _close(self) -> None:
        for fd in (self._answer_read, self._answer_write):
            if fd is not None:
                os.close(fd)
        self._answer_read = self._answer_write = None
        if self._process is not None:
            self._process.kill_group()
            self._process.wait(timeout=CAPTURE_TIMEOUT_S)
            assert self._streams is not None
            self._streams.join()
            self._process = None
        self._tmp.cleanup()

    def next_report(self, timeout_s: float, too_slow: str) -> CapturedEvent | None:
        """Wait for the process to report its graph (the event) or to end (None); a UserError saying
        `too_slow` after `timeout_s`."""
        assert self._process is not None and self._streams is not None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                event = self._streams.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise UserError(f"{self.script}: {too_slow}") from None
            if event is None:
                self._code = self._process.wait(timeout=max(1.0, deadline - time.monotonic()))
                return None
            self._streams.seen.append(event)
            if isinstance(event, CapturedEvent):
                return event

    def answer(self, answer: AfterCapture) -> None:
        """Tell the process that waits at its capture point what to do."""
        assert self._answer_write is not None, "answer a process started with ask=True, once"
        os.write(self._answer_write, answer.as_line())
        os.close(self._answer_write)
        self._answer_write = None

    def written(self, failed: str) -> Path:
        """The file the hook wrote, once the process has ended (`next_report` returned None) having
        written it; else a UserError: `failed` says what a failing script failed at (before its exit
        code and stderr), a refusal by adrun's hook is its message, and a script that ended having
        trained nothing adrun sees is told what adrun runs."""
        assert self._streams is not None
        code, events = self._code, self._streams.seen
        if code == HOOK_DONE_EXIT_CODE and any(isinstance(event, DoneEvent) for event in events):
            return self.out
        refusals = [event for event in events if isinstance(event, RefusalEvent)]
        if refusals:
            raise UserError(f"{self.script}: {refusals[-1].message}")
        if code != HOOK_DONE_EXIT_CODE:
            raise UserError(
                f"{self.script}: {failed} (exit code {code}); last lines of its stderr:\n"
                f"{_tail(bytes(self._streams.stderr))}"
            )
        raise UserError(
            f"{self.script}: finished without creating a tf.compat.v1.Session or applying an optimizer, so there is "
            "nothing to distribute. adrun runs graph-mode scripts (a tf.compat.v1.Session or "
            "MonitoredTrainingSession) and TF2 scripts (Keras model.fit, optimizer.apply_gradients or apply)."
        )


def require_training_op(script: Path, item: GraphItem) -> GraphItem:
    """`item`, or a UserError when its graph has nothing to train."""
    if not item.trainable_with_grads():
        raise UserError(
            f"{script}: its graph has no training op: no tf.compat.v1.train optimizer's minimize() or "
            "apply_gradients() was called before the Session was created (or, for a Session created before "
            "the model, before the script ended), so there are no gradients to synchronize."
        )
    return item


def capture_graph(
    script: Path, script_args: list[str], num_workers: int, job_id: str, python: str = sys.executable
) -> GraphItem:
    """Run `script` as worker 0 until its graph is captured and return what the graph holds.

    Raises UserError when the script fails, is refused by adrun's hook, neither creates a Session
    (graph mode) nor applies an optimizer (TF2 mode, captured at its first apply), or has nothing
    to train.
    """
    with ScriptProcess(script, script_args, num_workers, job_id, Mode.CAPTURE, python=python) as process:
        process.next_report(CAPTURE_TIMEOUT_S, _NOT_CAPTURED)
        item = load_graph_item(process.written(_FAILED_BEFORE_CAPTURE))
    return require_training_op(script, item)


class CaptureThenProfile:
    """One start of the script for a builder that profiles (Auto): its graph first, then, only if
    the launcher asks (no plan remembered for it), its profile from the same process, so that a
    first start imports TensorFlow and builds the model once (bench/RESULTS-auto-start.md).

    The process runs in profile mode and waits where capture would end it
    (adrun/runtime/capture_point.py). `graph()` waits for that; `profile_samples()` tells it to go on
    and waits for its samples; leaving the `with` block without asking for them tells it to stop.
    A script that ends before the capture point (a step or two) has written its samples by then:
    they give the graph, and are the profile. Errors and refusals read as capture's and the
    profile's do (`ScriptProcess.written`)."""

    def __init__(self, script: Path, script_args: list[str], num_workers: int, job_id: str,
                 profile_steps: tuple[int, int], python: str = sys.executable) -> None:
        self.script = script
        self._steps = sum(profile_steps)
        self._process = ScriptProcess(script, script_args, num_workers, job_id, Mode.PROFILE,
                                      profile_steps=profile_steps, ask=True, python=python)
        self._graph: GraphItem | None = None
        self._samples: ProfileSamples | None = None

    def __enter__(self) -> CaptureThenProfile:
        self._process.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._process.__exit__(exc_type, exc, tb)

    def graph(self) -> GraphItem:
        """The script's graph, as capture describes it (a UserError as capture's when it has none)."""
        if self._graph is None:
            captured = self._process.next_report(CAPTURE_TIMEOUT_S, _NOT_CAPTURED)
            if captured is not None:
                self._graph = load_graph_item(captured.wrote)
            else:
                self._samples = load_samples(self._process.written(_FAILED_BEFORE_CAPTURE))
                self._graph = self._samples.graph
        return require_training_op(self.script, self._graph)

    def profile_samples(self) -> ProfileSamples:
        """What the process measured, going on from its capture point (once)."""
        self.graph()
        if self._samples is None:
            self._process.answer(AfterCapture.PROFILE)
            self._process.next_report(
                CAPTURE_TIMEOUT_S,
                f"did not run {self._steps} training steps within {CAPTURE_TIMEOUT_S} s while adrun profiled it",
            )
            self._samples = load_samples(self._process.written("failed while adrun profiled it"))
        return self._samples
