"""Supervising one attempt of a job: start its tasks, watch them, apply the failure policy, tear down.

Policy: the job succeeds when every worker exits 0; the PS tasks serve forever, so they are then
stopped. Workers that finished a bounded run and wait are released once every worker has finished
or exited (`finish_barrier`). Any task ending otherwise while the job runs (a non-zero exit, a signal, or a PS ending
at all) fails the job, and the first such task is its root cause; so does a stalled worker under
`on_stall="fail"` (`stalls`). The interrupt event (set by the CLI on Ctrl-C or SIGTERM)
interrupts the job. In every case all tasks are stopped the same way before returning, and no
process of the job is left alive on any of its machines. Whether a failed attempt is started
again is `restarts`' decision; what is kept of each task's output is `streams`'.

The supervisor decides and records; it shows nothing itself. Everything the user sees goes
through a `JobListener`, which `adrun.ui` implements, all calls made from the supervising thread.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from adrun.env_vars import OP_TIMEOUT_VAR, Settings
from adrun.errors import UserError
from adrun.exit_codes import INTERRUPTED_EXIT_CODE
from adrun.task_events import ErrorEvent, FinishedEvent, RefusalEvent, StepEvent, TaskEvent, WaitingEvent

from .backends import sweep
from .config import JobConfig
from .failures import Failure, TaskStalled, cause_of
from .finish_barrier import FinishBarrier
from .metrics import Throughput
from .plan import TaskLaunch
from .process import OutputLines, TaskProcess
from .results import JobResult, Stream, TaskOutcome
from .stalls import Progress, StallWatch
from .streams import TaskOutput, open_log
from .tasks import Task
from .teardown import stop_processes

_PROGRESS_INTERVAL_S = 1.0
_TICK_S = 0.1
_EOF_WAIT_S = 2.0


class JobListener(Protocol):
    """What the supervisor reports while a job runs."""

    def job_started(self, job_id: str, tasks: Sequence[Task]) -> None: ...

    def task_output(self, task: Task, stream: Stream, line: str) -> None:
        """One line of a task's output (its event lines excluded), as it arrives."""

    def noise_folded(self, task: Task, count: int) -> None:
        """`count` lines of TensorFlow start-up noise (`tf_noise`) of `task` were not shown; said
        before the task's next shown line (or its first step, or the job's end)."""

    def progress(self, throughput: Throughput, elapsed_s: float) -> None:
        """Called about once a second while the job runs."""

    def stopping(self, reason: str) -> None:
        """The job is over (success, failure or interrupt) and its tasks are being stopped."""

    def warning(self, message: str) -> None:
        """Something looks wrong but the job goes on (e.g. a worker stalls)."""


def supervise(launches: Sequence[TaskLaunch], config: JobConfig, listener: JobListener, *, attempt: int = 0,
              interrupt: threading.Event | None = None) -> JobResult:
    """Run `launches` (PS tasks first, each on its machine `launch.node`) as attempt `attempt` of
    `config`'s job until it succeeds, fails, or `interrupt` is set.

    Of `config` this reads the job id, how output is shown and logged (a later attempt appends
    to the logs), the stall policy and the grace before SIGKILL. When this returns, no process
    whose environment carries `ADRUN_JOB_ID=<job id>` is alive on any machine of the launches.
    Must run in the thread that should own the tasks (see `adrun.launch.job.local`).
    """
    return _Job(config, listener, attempt, interrupt or threading.Event()).run(launches)


@dataclass
class _Running:
    launch: TaskLaunch
    proc: TaskProcess
    output: TaskOutput
    returncode: int | None = None
    stopped: bool = False
    progress: Progress = field(default_factory=Progress)
    error: ErrorEvent | None = None  # the exception the task reported ending on
    refusal: RefusalEvent | None = None  # why adrun's hook refused the script

    @property
    def task(self) -> Task:
        return self.launch.task


class _Job:
    def __init__(self, config: JobConfig, listener: JobListener, attempt: int, interrupt: threading.Event) -> None:
        self.config = config
        self.listener = listener
        self.attempt = attempt
        self.interrupt = interrupt
        self.running: list[_Running] = []
        self.lines: queue.SimpleQueue[tuple[_Running, Stream, str | None]] = queue.SimpleQueue()
        self.throughput = Throughput()
        self.stalls = StallWatch(config.stall_timeout_s, config.on_stall)
        settings = config.settings if config.settings is not None else Settings.from_env(os.environ)
        self.barrier = FinishBarrier(settings.op_timeout_s)
        self.failure: Failure | None = None

    def run(self, launches: Sequence[TaskLaunch]) -> JobResult:
        started = time.monotonic()
        try:
            self._start_all(launches)
            self.listener.job_started(self.config.job_id, [r.task for r in self.running])
            self._watch(started)
        finally:
            self._teardown(launches)
        return self._result(time.monotonic() - started)

    # --- start -------------------------------------------------------------------------------

    def _start_all(self, launches: Sequence[TaskLaunch]) -> None:
        """PS tasks first, so workers find their servers; readers start once all are forked,
        so no reader thread is mid-read while another task forks."""
        try:
            for launch in sorted(launches, key=lambda item: item.task.role != "ps"):
                self.running.append(self._start(launch))
        finally:
            for run in self.running:
                for name, pipe in (("stdout", run.proc.stdout), ("stderr", run.proc.stderr)):
                    threading.Thread(target=self._pump, args=(run, name, pipe), daemon=True).start()

    def _start(self, launch: TaskLaunch) -> _Running:
        config = self.config
        log = open_log(config.log_dir, launch.task.label, self.attempt)
        try:
            proc = launch.node.start(launch.argv, launch.env, launch.cwd, config.job_id,
                                     release=launch.task.role == "worker")
        except OSError as e:
            if log:
                log.close()
            raise UserError(
                f"cannot start {launch.task.tag} on {launch.task.host}: {launch.argv[0]}: {e.strerror or e}"
            ) from e
        chief = launch.task.role == "worker" and launch.task.index == 0
        return _Running(launch, proc, TaskOutput(log, chief=chief, quiet=config.quiet, show_noise=config.show_tf_noise))

    def _pump(self, run: _Running, stream: Stream, pipe: OutputLines) -> None:
        """Reader thread: queue each line of one stream, then None at end of stream."""
        with pipe:
            for raw in pipe:
                self.lines.put((run, stream, raw.decode("utf-8", errors="replace").rstrip("\r\n")))
        self.lines.put((run, stream, None))

    # --- watch -------------------------------------------------------------------------------

    def _watch(self, started: float) -> None:
        """Return when the job is decided: all workers done, a task failed, or interrupted."""
        next_progress = time.monotonic() + _PROGRESS_INTERVAL_S
        workers = [r for r in self.running if r.task.role == "worker"]
        while True:
            self._dispatch(_TICK_S)
            if self.interrupt.is_set():
                self.listener.stopping("interrupted: stopping all tasks")
                return
            for run in self.running:
                if run.returncode is None and (code := run.proc.poll()) is not None:
                    run.returncode = code
                    if code != 0 or run.task.role == "ps":
                        self._fail(run)
                        return
            if all(r.returncode == 0 for r in workers):
                self.listener.stopping("all workers finished: stopping the parameter servers")
                return
            for run in self.barrier.to_release(workers):
                run.proc.release()
            now = time.monotonic()
            if self._check_barrier(workers, now):
                return
            if now >= next_progress:
                self.listener.progress(self.throughput, now - started)
                if self._check_stalls(workers, now):
                    return
                next_progress = now + _PROGRESS_INTERVAL_S

    def _check_stalls(self, workers: Sequence[_Running], now: float) -> bool:
        """Warn of stalled workers, or fail the job on the one blamed; True when it failed."""
        check = self.stalls.check(workers, now)
        for warning in check.warnings:
            self.listener.warning(warning)
        blamed = check.blamed
        if blamed is None:
            return False
        self.failure = Failure(blamed.task, TaskStalled(check.detail), list(blamed.output.tail),
                               list(blamed.output.stdout_tail), blamed.progress.last_step)
        self.listener.stopping(f"{self.failure.summary}: stopping the job (--on-stall fail)")
        return True

    def _check_barrier(self, workers: Sequence[_Running], now: float) -> bool:
        """Fail the job on the first worker that never finished while others waited at the
        finish barrier past its bound; True when it failed."""
        overdue = self.barrier.overdue(workers, now)
        if overdue is None:
            return False
        late = overdue.late[0]
        cause = TaskStalled(overdue.detail, stopped_by=f"{OP_TIMEOUT_VAR} at the finish barrier")
        self.failure = Failure(late.task, cause, list(late.output.tail), list(late.output.stdout_tail),
                               late.progress.last_step)
        self.listener.stopping(f"{self.failure.summary}: stopping the job")
        return True

    def _fail(self, run: _Running) -> None:
        lost = run.proc.lost
        if lost is None:  # a lost task's streams have ended, or never will (its node is silent)
            self._drain_until(lambda: run.output.open_streams == 0, _EOF_WAIT_S)
        assert run.returncode is not None
        step = run.progress.last_step if run.task.role == "worker" else max(
            (r.progress.last_step for r in self.running if r.progress.last_step is not None), default=None)
        cause = cause_of(run.returncode, lost=lost, error=run.error, refusal=run.refusal)
        self.failure = Failure(run.task, cause, list(run.output.tail), list(run.output.stdout_tail), step)
        self.listener.stopping(f"{self.failure.summary}: stopping the other tasks")

    def _dispatch(self, timeout: float) -> None:
        """Handle queued lines: wait up to `timeout` for the first, then take what is there."""
        try:
            item = self.lines.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(*item)
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return

    def _drain_until(self, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            self._dispatch(min(_TICK_S, max(0.0, deadline - time.monotonic())))

    def _handle(self, run: _Running, stream: Stream, line: str | None) -> None:
        if line is None:
            run.output.open_streams -= 1
            return
        taken = run.output.read(stream, line)
        if not isinstance(taken, list):
            self._take_event(run, taken)
            self._say_folded(run)
            return
        if taken:
            self._say_folded(run)
        for shown in taken:
            self.listener.task_output(run.task, stream, shown)

    def _say_folded(self, run: _Running) -> None:
        if count := run.output.folded():
            self.listener.noise_folded(run.task, count)

    def _take_event(self, run: _Running, event: TaskEvent) -> None:
        """What a task reported (adrun/task_events.py): its steps, a step it waits in, its finish
        of a bounded run, the exception it ends on, a refusal by adrun's hook."""
        if isinstance(event, ErrorEvent):
            run.error = event
        elif isinstance(event, RefusalEvent):
            run.refusal = event
        elif run.task.role == "worker" and isinstance(event, FinishedEvent):
            run.progress.finished = True
            self.barrier.finished(run.task, time.monotonic())
        elif run.task.role == "worker" and isinstance(event, (StepEvent, WaitingEvent)):
            if isinstance(event, StepEvent):
                self.throughput.record(run.task.index, event)
            self.stalls.noted(run.progress, event, [r.progress for r in self.running])

    # --- stop --------------------------------------------------------------------------------

    def _teardown(self, launches: Sequence[TaskLaunch]) -> None:
        """Stop every task, make sure nothing of the job survives on any of its machines (even
        one whose task failed to start), flush what they last wrote."""
        for run in self.running:
            run.stopped = run.proc.poll() is None
        stop_processes([r.proc for r in self.running], self.config.grace_s)
        for problem in sweep(list(dict.fromkeys(launch.node for launch in launches)), self.config.job_id):
            self.listener.warning(f"final sweep: {problem}")
        for run in self.running:
            run.returncode = run.proc.poll()
        self._drain_until(lambda: all(r.output.open_streams == 0 for r in self.running), _EOF_WAIT_S)
        for run in self.running:
            self._say_folded(run)
            run.output.close()

    def _result(self, elapsed_s: float) -> JobResult:
        interrupted = self.interrupt.is_set()
        if self.failure:
            exit_code = self.failure.job_exit_code
        elif interrupted:
            exit_code = INTERRUPTED_EXIT_CODE
        else:
            exit_code = 0
        outcomes = [TaskOutcome(r.task, r.proc.pid, r.returncode, r.stopped) for r in self.running]
        return JobResult(exit_code, self.failure, interrupted and self.failure is None, self.throughput, outcomes,
                         elapsed_s)
