"""Running a job: start its tasks, stream their output, apply the failure policy, tear down.

Policy: the job succeeds when every worker exits 0; the PS tasks serve forever, so they are then
stopped. Any task ending otherwise while the job runs (a non-zero exit, a signal, or a PS ending
at all) fails the job, and the first such task is its root cause; so does a stalled worker under
`on_stall="fail"`. Ctrl-C or SIGTERM to the launcher interrupts the job. In every case all tasks
are stopped the same way before returning, and no process of the job is left alive. This is one
attempt of a job: whether a failed attempt is started again is `adrun.launch.job.restarts`' decision.

The supervisor decides and records; it shows nothing itself. Everything the user sees goes
through a `JobListener`, which `adrun.ui` implements, all calls made from the supervising thread.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol, TextIO

from adrun.env_vars import Settings
from adrun.defaults import RESTART_BACKOFF_S, STALL_TIMEOUT_S
from adrun.errors import UserError
from adrun.exit_codes import INTERRUPTED_EXIT_CODE
from adrun.job_state import JobState
from adrun.spec import ClusterSpec
from adrun.task_events import ErrorEvent, RefusalEvent, StepEvent, TaskEvent, WaitingEvent, decode

from .fencing import JobFences, close_ports
from .plan import TaskLaunch, plan_job
from .failures import Failure, TaskStalled, cause_of, signal_name
from .local import LocalProcess
from .metrics import Throughput
from .process import OutputLines, TaskProcess
from .progress_bars import ProgressBars, on_screen
from .provision import RemoteNodes, local_traffic
from .tasks import Task
from .teardown import GRACE_S, kill_leftovers, stop_processes
from .tf_noise import NoiseFilter

Stream = Literal["stdout", "stderr"]

TAIL_LINES = 20
OUTPUT_TAIL_LINES = 5
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


@dataclass(frozen=True)
class TaskOutcome:
    task: Task
    pid: int
    returncode: int | None  # None only if the task could not be reaped
    stopped: bool  # ended because adrun stopped it (after success, a failure or an interrupt)

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.returncode)


@dataclass(frozen=True)
class Attempt:
    """How one attempt of a job ended, and whether adrun started the job again after it."""

    number: int  # ADRUN_RESTART_COUNT of its processes: 0 for the first
    exit_code: int
    failed: Failure | None
    steps: int  # training steps its workers ran, summed over the workers
    elapsed_s: float
    restarted: bool = False
    verdict: str | None = None  # why it was (or was not) restarted; None when it did not fail


@dataclass(frozen=True)
class JobResult:
    """How a job ended, as data: what launching and supervising return, what ui shows and what
    `report.job_report` writes out as JSON."""

    exit_code: int
    failed: Failure | None  # the root cause; None when no task failed the job
    interrupted: bool
    metrics: Throughput  # per-worker steps and rates
    outcomes: list[TaskOutcome]  # per task: exit or signal, and whether adrun stopped it
    elapsed_s: float
    traffic: dict[str, tuple[int, int]] = field(default_factory=dict)  # node: (bytes sent, received)
    attempts: list[Attempt] = field(default_factory=list)  # every attempt, this one last (restarts.py)

    @property
    def state(self) -> JobState:
        """SUCCEEDED, FAILED or INTERRUPTED: the states a supervised job ends in."""
        if self.interrupted:
            return JobState.INTERRUPTED
        return JobState.SUCCEEDED if self.exit_code == 0 else JobState.FAILED


def supervise(
    launches: Sequence[TaskLaunch],
    job_id: str,
    listener: JobListener,
    *,
    quiet: bool = False,
    log_dir: Path | None = None,
    grace_s: float = GRACE_S,
    remote: RemoteNodes | None = None,
    stall_timeout_s: float | None = STALL_TIMEOUT_S,
    show_tf_noise: bool = False,
    on_stall: Literal["warn", "fail"] = "warn",
    attempt: int = 0,
) -> JobResult:
    """Run `launches` (PS tasks first) as job `job_id` until it succeeds, fails or is interrupted.

    `quiet` keeps task lines from the listener (tails, logs and metrics are still kept);
    TensorFlow's start-up noise (`tf_noise`) reaches it only with `show_tf_noise`, else as a count,
    and a Keras progress bar as its final state, condensed to a line per epoch for a non-chief
    worker unless `show_tf_noise` (`progress_bars`);
    `log_dir` gets one `<tag>.log` per task with every line of both streams (a later `attempt`
    appends to it). When this returns, no process whose environment carries `ADRUN_JOB_ID=job_id`
    is alive. Must run in the thread that should own the tasks (see `adrun.launch.job.local`); in the
    main thread it also handles SIGINT/SIGTERM as an interrupt. Remote tasks (`task.remote`) start
    through `remote`, whose nodes are swept for the job's leftovers too. A worker without a new
    step for `stall_timeout_s` (None: never), counted from the first training step of any worker
    (start-up is no stall), gets a warning, since a slow step is not a dead one; with
    `on_stall="fail"` the stalled worker most likely holding up the others fails the job instead
    (exit STALL_EXIT_CODE).
    """
    return _Job(job_id, listener, quiet, log_dir, grace_s, remote, stall_timeout_s, show_tf_noise, on_stall,
                attempt).run(launches)


@dataclass
class _Running:
    launch: TaskLaunch
    proc: TaskProcess
    log: TextIO | None
    bars: ProgressBars  # how its lines show in the live view (Keras progress bars)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))  # stderr, noise left out
    stdout_tail: deque[str] = field(default_factory=lambda: deque(maxlen=OUTPUT_TAIL_LINES))
    stderr_noise: NoiseFilter = field(default_factory=NoiseFilter)
    folded: int = 0  # noise lines not shown since the task's last shown line
    open_streams: int = 2
    returncode: int | None = None
    stopped: bool = False
    progress_at: float = field(default_factory=time.monotonic)  # last new step (or start)
    last_step: int | None = None
    stall_warned: bool = False
    waiting_since: float | None = None  # blocked inside a training step since (a `waiting` event)
    error: ErrorEvent | None = None  # the exception the task reported ending on
    refusal: RefusalEvent | None = None  # why adrun's hook refused the script

    @property
    def task(self) -> Task:
        return self.launch.task


class _Job:
    def __init__(
        self, job_id: str, listener: JobListener, quiet: bool, log_dir: Path | None, grace_s: float,
        remote: RemoteNodes | None, stall_timeout_s: float | None, show_tf_noise: bool = False,
        on_stall: Literal["warn", "fail"] = "warn", attempt: int = 0,
    ) -> None:
        self.attempt = attempt
        self.job_id = job_id
        self.remote = remote
        self.stall_timeout_s = stall_timeout_s
        self.on_stall = on_stall
        self.listener = listener
        self.quiet = quiet
        self.show_tf_noise = show_tf_noise
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.running: list[_Running] = []
        self.lines: queue.SimpleQueue[tuple[_Running, Stream, str | None]] = queue.SimpleQueue()
        self.throughput = Throughput()
        self.interrupted = False
        self.failure: Failure | None = None
        self.training = False  # some worker has begun a training step: start-up is over

    def run(self, launches: Sequence[TaskLaunch]) -> JobResult:
        started = time.monotonic()
        previous_handlers = self._trap_signals()
        try:
            self._start_all(launches)
            self.listener.job_started(self.job_id, [r.task for r in self.running])
            self._watch(started)
        finally:
            self._teardown()
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
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
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = open(self.log_dir / f"{launch.task.label}.log", "a" if self.attempt else "w", encoding="utf-8",
                       buffering=1)
            if self.attempt:
                log.write(f"--- adrun: attempt {self.attempt} (ADRUN_RESTART_COUNT={self.attempt}) ---\n")
        try:
            if launch.task.remote:
                assert self.remote is not None, "a remote task needs the job's SSH connections"
                proc: TaskProcess = self.remote.start(launch, self.job_id)
            else:
                proc = LocalProcess(launch.argv, cwd=launch.cwd, env=launch.env)
        except OSError as e:
            if log:
                log.close()
            raise UserError(
                f"cannot start {launch.task.tag} on {launch.task.host}: {launch.argv[0]}: {e.strerror or e}"
            ) from e
        is_chief = launch.task.role == "worker" and launch.task.index == 0
        return _Running(launch, proc, log, ProgressBars(is_chief, show_all=self.show_tf_noise))

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
            if self.interrupted:
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
            now = time.monotonic()
            if now >= next_progress:
                self.listener.progress(self.throughput, now - started)
                if self._check_stalls(workers, now):
                    return
                next_progress = now + _PROGRESS_INTERVAL_S

    def _check_stalls(self, workers: Sequence[_Running], now: float) -> bool:
        """Warn once per stall about a running worker whose step count has not moved, or, with
        `on_stall="fail"`, fail the job naming the worker most likely to hold up the others (one
        outside any training step that the stalled worker's step waits for); True when it failed."""
        if self.stall_timeout_s is None or not self.training:
            return False
        # a worker outside any step holds up the ones waiting inside one: it comes first
        stalled = sorted((r for r in workers if r.returncode is None and not r.stall_warned
                          and now - r.progress_at >= self.stall_timeout_s),
                         key=lambda r: (r.waiting_since is not None, r.progress_at))
        for run in stalled:
            run.stall_warned = True
            if self.on_stall == "fail":
                blamed = _holding_up(run, workers) or run
                self.failure = Failure(blamed.task, TaskStalled(_stall_detail(blamed, workers, now)),
                                       list(blamed.tail), list(blamed.stdout_tail), blamed.last_step)
                self.listener.stopping(f"{self.failure.summary}: stopping the job (--on-stall fail)")
                return True
            detail = _stall_detail(run, workers, now)
            self.listener.warning(f"{run.task.label} (worker {run.task.index} on {run.task.host}) {detail}")
        return False

    def _fail(self, run: _Running) -> None:
        lost = run.proc.lost
        if lost is None:  # a lost task's streams have ended, or never will (its node is silent)
            self._drain_until(lambda: run.open_streams == 0, _EOF_WAIT_S)
        assert run.returncode is not None
        step = run.last_step if run.task.role == "worker" else max(
            (r.last_step for r in self.running if r.last_step is not None), default=None)
        cause = cause_of(run.returncode, lost=lost, error=run.error, refusal=run.refusal)
        self.failure = Failure(run.task, cause, list(run.tail), list(run.stdout_tail), step)
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
            run.open_streams -= 1
            return
        if stream == "stderr":
            event = decode(line)
            if event is not None:
                self._take_event(run, event)
                self._say_folded(run)
                return
            noise = run.stderr_noise.is_noise(line)
            if not noise:
                run.tail.append(line)
        else:
            noise = False
            run.stdout_tail.append(on_screen(line))  # a progress bar as it was left, not its redraws
        if run.log:
            run.log.write(line + "\n")
        if noise and not self.show_tf_noise:
            run.folded += 1
        elif not self.quiet:
            self._say_folded(run)
            for shown in run.bars.shown(line):
                self.listener.task_output(run.task, stream, shown)

    def _say_folded(self, run: _Running) -> None:
        if run.folded and not self.quiet:
            self.listener.noise_folded(run.task, run.folded)
        run.folded = 0

    def _take_event(self, run: _Running, event: TaskEvent) -> None:
        """What a task reported (adrun/task_events.py): its steps, a step it waits in, the
        exception it ends on, a refusal by adrun's hook."""
        if isinstance(event, ErrorEvent):
            run.error = event
        elif isinstance(event, RefusalEvent):
            run.refusal = event
        elif run.task.role == "worker" and isinstance(event, (StepEvent, WaitingEvent)):
            if isinstance(event, StepEvent):
                self.throughput.record(run.task.index, event)
            self._note_step(run, event)

    def _note_step(self, run: _Running, event: StepEvent | WaitingEvent) -> None:
        if not self.training:
            # Start-up (importing TF, building graphs, the chief's initialization) is not a stall;
            # the stall clocks of the workers still starting start now.
            self.training = True
            for other in self.running:
                if other.last_step is None:
                    other.progress_at = time.monotonic()
        if isinstance(event, StepEvent):
            if event.step != run.last_step:
                run.last_step, run.progress_at, run.stall_warned = event.step, time.monotonic(), False
                run.waiting_since = None
        else:
            # the worker's clock may differ from this one: keep only how long it has waited
            run.waiting_since = time.monotonic() - max(0.0, event.time - event.since)

    # --- stop --------------------------------------------------------------------------------

    def _teardown(self) -> None:
        """Stop every task, make sure nothing of the job survives, flush what they last wrote."""
        for run in self.running:
            run.stopped = run.proc.poll() is None
        stop_processes([r.proc for r in self.running], self.grace_s)
        if any(not r.task.remote for r in self.running):
            kill_leftovers(self.job_id)
        if self.remote is not None:
            for problem in self.remote.sweep(self.job_id):
                self.listener.warning(f"final sweep: {problem}")
        for run in self.running:
            run.returncode = run.proc.poll()
        self._drain_until(lambda: all(r.open_streams == 0 for r in self.running), _EOF_WAIT_S)
        for run in self.running:
            self._say_folded(run)
            if run.log:
                run.log.close()

    def _result(self, elapsed_s: float) -> JobResult:
        if self.failure:
            exit_code = self.failure.job_exit_code
        elif self.interrupted:
            exit_code = INTERRUPTED_EXIT_CODE
        else:
            exit_code = 0
        outcomes = [TaskOutcome(r.task, r.proc.pid, r.returncode, r.stopped) for r in self.running]
        interrupted = self.interrupted and self.failure is None
        return JobResult(exit_code, self.failure, interrupted, self.throughput, outcomes, elapsed_s)

    # --- signals -----------------------------------------------------------------------------

    def _trap_signals(self) -> dict[int, Any]:
        """Turn SIGINT/SIGTERM into an orderly stop; only the main thread may set handlers."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.signal(sig, self._on_signal)
            previous[sig] = handler if handler is not None else signal.SIG_DFL
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True


def _stall_detail(run: _Running, workers: Sequence[_Running], now: float) -> str:
    """What the launcher can tell about a stall: how long this worker has not stepped, whether it
    is blocked inside a training step (then it waits for a PS or a peer) or outside one (then its
    script is busy or hung, and peers in a synchronous step wait for it), and where the others are."""
    detail = f"has made no training progress for {now - run.progress_at:.0f} s ({_activity(run, now, 'still ')})"
    others = [f"{other.task.label} {_activity(other, now)}" for other in workers if other is not run]
    if others:
        detail += "; other workers: " + ", ".join(others)
    if run.waiting_since is not None:
        return detail + "; it is waiting for a parameter server or another worker"
    if run.last_step is None:
        return detail + "; it has not started training while others have (still building its graph?)"
    if any(other.waiting_since is not None for other in workers if other is not run):
        return detail + "; its script is busy or hung outside TensorFlow, and the others wait for it"
    return detail + "; its script is busy or hung outside TensorFlow"


def _holding_up(run: _Running, workers: Sequence[_Running]) -> _Running | None:
    """The worker a stalled `run`, blocked inside a training step, most likely waits for: a
    running worker outside any step, no further than `run` (a synchronous step needs its
    gradient), the one that stopped first. None when `run` is outside a step itself or no such
    worker exists (then it waits for a parameter server or the network)."""
    if run.waiting_since is None:
        return None
    behind = [other for other in workers if other is not run and other.returncode is None
              and other.waiting_since is None and (other.last_step or 0) <= (run.last_step or 0)]
    return min(behind, key=lambda other: other.progress_at, default=None)


def _activity(run: _Running, now: float, still: str = "") -> str:
    """`at step 3, waiting in step 4 for 21 s`: one worker's state as the launcher last heard it."""
    if run.returncode is not None:
        return f"finished (exit {run.returncode})"
    text = "no step yet" if run.last_step is None else f"{still}at step {run.last_step}"
    if run.waiting_since is not None:
        return f"{text}, waiting in step {(run.last_step or 0) + 1} for {now - run.waiting_since:.0f} s"
    if run.last_step is not None:
        text += ", outside any training step"
    return text


# --- one attempt of a job, for the CLI (restarts.py runs the attempts) ------------------------


@dataclass(frozen=True)
class JobConfig:
    job_id: str
    spec: ClusterSpec
    script: Path
    script_args: list[str]
    strategy_file: Path
    quiet: bool = False
    log_dir: Path | None = None
    stall_timeout_s: float | None = STALL_TIMEOUT_S
    show_tf_noise: bool = False
    on_stall: Literal["warn", "fail"] = "warn"
    max_restarts: int = 0
    restart_backoff_s: float = RESTART_BACKOFF_S
    settings: Settings | None = None  # what every task is told (None: the launcher environment's ADRUN_* settings)
    allow_exposed: bool = False  # True: leave the TF ports open to every host, install no rule, warn of nothing


def run_attempt(config: JobConfig, remote: RemoteNodes, listener: JobListener, attempt: int = 0) -> JobResult:
    """Start attempt `attempt` of `config`'s job (remote nodes through `remote`, already connected
    and checked) on ports chosen now, closed to every host outside the job while it runs
    (`fencing.close_ports`; a warning names each machine left open), and return how it ended,
    with each node's network bytes meanwhile. Its processes see the attempt as ADRUN_RESTART_COUNT."""
    here = ", ".join(n.address for n in config.spec.nodes if n.address not in remote.links)
    before = remote.prepare_launch(config.strategy_file)
    local_before = local_traffic() if here else None
    launches = plan_job(config.spec, config.script, config.script_args, job_id=config.job_id,
                        strategy_file=config.strategy_file, remote_ports=remote.ports, restart_count=attempt,
                        settings=config.settings)
    fences = JobFences() if config.allow_exposed else close_ports(launches, config.job_id, attempt, remote)
    try:
        if (exposed := fences.warning()) is not None:
            listener.warning(exposed)
        result = supervise(launches, config.job_id, listener, quiet=config.quiet, log_dir=config.log_dir,
                           remote=remote, stall_timeout_s=config.stall_timeout_s, show_tf_noise=config.show_tf_noise,
                           on_stall=config.on_stall, attempt=attempt)
    finally:
        fences.close()
    after = remote.traffic()
    if local_before is not None:
        after[here] = local_traffic()
        before[here] = local_before
    result.traffic.update({node: (sent - before[node][0], recv - before[node][1])
                           for node, (sent, recv) in after.items() if node in before})
    return result
