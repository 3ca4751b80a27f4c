"""Restarting a failed job: which failures a restart can cure, and the loop of attempts.

A restart starts the whole job again from the plan it already has (no new capture: the graph and
the strategy are the same), after the failed attempt was torn down like any failed job, on new
ports, with ADRUN_RESTART_COUNT one higher. What the script resumes from is its own business: a
MonitoredTrainingSession(checkpoint_dir=...) or a Saver restore picks up the last checkpoint.

The rule (`judge`), in order:
  1. a worker the hook refused (`TaskRefused`: its graph is not the planned one) is not
     restarted: the same script builds the same graph again;
  2. a task killed by a signal, a task whose node was lost, a stalled worker (`--on-stall fail`)
     and a parameter server that ended (it runs adrun's server, never the user's code) are
     restarted: machines, networks and the OOM killer cause these;
  3. a worker that raised one of TF's runtime errors about a peer (`TaskRaised` whose error's
     `tf_error` is in RESTARTABLE_ERRORS: a dead or unreachable peer, an aborted step, an
     operation that timed out; the task decides the class, from the exception object) is restarted;
  4. any other worker exit is not: an exception of the script's own, or an exit code it chose,
     is an error in the script or its input that a restart would repeat;
  5. a failure restarted by 2 or 3 is not restarted when the attempt before ended the same way:
     the same task, the same cause (the same signal, exception class, lost node, or a stall)
     and the same step. A deterministic crash would otherwise use up the whole budget.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from adrun.errors import UserError

from .attempt import run_attempt
from .backends import JobNodes
from .config import JobConfig
from .failures import Cause, Failure, NodeLost, TaskKilled, TaskRaised, TaskRefused, TaskStalled
from .provision import RemoteNodes
from .results import Attempt, JobResult
from .supervisor import JobListener

RESTARTABLE_ERRORS = frozenset({"UnavailableError", "AbortedError", "DeadlineExceededError"})


@dataclass(frozen=True)
class Verdict:
    restart: bool
    reason: str


def judge(failure: Failure, previous: Failure | None = None) -> Verdict:
    """Whether a restart can cure `failure`, given how the attempt before ended (`previous`,
    None for the first attempt or one that did not fail); see the module's rule."""
    task, cause = failure.task, failure.cause
    if task.role == "worker" and isinstance(cause, TaskRefused):
        return Verdict(False, "the script built a different graph than the one planned; it would again")
    curable = _curable_cause(failure)
    if curable is None:
        what = (f"raised {cause.error.name}" if isinstance(cause, TaskRaised)
                else f"exited with code {failure.returncode}")
        return Verdict(False, f"the script {what}: an error in the script or its input, which a restart would repeat")
    if previous is not None and _same_way(previous.cause, cause) and previous.task.tag == task.tag \
            and previous.step == failure.step:
        at = "before its first step" if failure.step is None else f"at step {failure.step}"
        return Verdict(False, f"{task.tag} failed the same way {at} in the attempt before ({curable}); "
                              "a restart would repeat it")
    return Verdict(True, curable)


def _curable_cause(failure: Failure) -> str | None:
    """Why a restart may cure `failure`, or None when it cannot."""
    cause = failure.cause
    if isinstance(cause, TaskStalled):
        return "a stalled worker"
    if isinstance(cause, NodeLost):
        return f"lost the connection to {failure.task.host}"
    if isinstance(cause, TaskKilled):
        return f"killed by {cause.signal}"
    if failure.task.role == "ps":
        return "a parameter server ended"
    if isinstance(cause, TaskRaised) and cause.error.tf_error in RESTARTABLE_ERRORS:
        return f"TensorFlow's {cause.error.tf_error}: a peer died, did not answer or aborted the step"
    return None


def _same_way(before: Cause, now: Cause) -> bool:
    """Whether two causes are the same, leaving out what changes from attempt to attempt: an
    exception's message (it names ports) and how long a stall lasted."""
    if type(before) is not type(now):
        return False
    if isinstance(before, TaskRaised) and isinstance(now, TaskRaised):
        return (before.returncode, before.error.exception) == (now.returncode, now.error.exception)
    return isinstance(now, TaskStalled) or before == now


class AttemptListener(JobListener, Protocol):
    """What the restart loop reports, besides each attempt's own events."""

    def attempt_started(self, number: int, max_restarts: int) -> None: ...

    def attempt_ended(self, attempt: Attempt, next_in_s: float | None) -> None:
        """`attempt` failed (or ended); `next_in_s` is the back-off before the next attempt,
        None when there is none."""


def run_attempts(
    start: Callable[[int], JobResult],
    max_restarts: int,
    backoff_s: float,
    listener: AttemptListener,
    *,
    unreachable: Callable[[], list[str]] = lambda: [],
    interrupt: threading.Event | None = None,
) -> JobResult:
    """Run attempt 0 through `start(0)`, and start the job again (`start(1)`, ...) after each
    failure `judge` calls curable, at most `max_restarts` times, `backoff_s` seconds apart.

    Before a restart every node must answer (`unreachable()` lists the ones that do not, by
    name): a node that is gone ends the job instead of being retried. `interrupt` set during the
    back-off (the user's Ctrl-C or SIGTERM, as the CLI hands it down) ends the job. Returns the
    last attempt's result, with every attempt in `attempts`, the wall time of them all and the
    traffic summed over them.
    """
    interrupt = interrupt or threading.Event()
    began = time.monotonic()
    attempts: list[Attempt] = []
    traffic: dict[str, tuple[int, int]] = {}
    last: JobResult | None = None
    number = 0
    while True:
        listener.attempt_started(number, max_restarts)
        try:
            result = start(number)
        except UserError as e:
            if last is None:
                raise
            attempts[-1] = replace(attempts[-1], restarted=False, verdict=f"not restarted: the restart failed: {e}")
            listener.warning(f"the restart failed: {e}")
            return _final(last, attempts, began, traffic)
        for node, (sent, received) in result.traffic.items():
            before = traffic.get(node, (0, 0))
            traffic[node] = (before[0] + sent, before[1] + received)
        steps = sum(rate.steps for rate in result.metrics.workers.values())
        attempt = Attempt(number, result.exit_code, result.failed, steps, result.elapsed_s)
        if result.failed is None:
            attempts.append(attempt)
            listener.attempt_ended(attempt, None)
            return _final(result, attempts, began, traffic)
        verdict = judge(result.failed, last.failed if last is not None else None)
        if verdict.restart and number >= max_restarts:
            verdict = Verdict(False, f"{verdict.reason}, but the restart budget "
                                     f"(--max-restarts {max_restarts}) is used up")
        if verdict.restart:
            gone = unreachable()
            if gone:
                verdict = Verdict(False, f"{verdict.reason}, but " + "; ".join(gone))
        attempt = replace(attempt, restarted=verdict.restart,
                          verdict=("restarted: " if verdict.restart else "not restarted: ") + verdict.reason)
        attempts.append(attempt)
        listener.attempt_ended(attempt, backoff_s if verdict.restart else None)
        if not verdict.restart:
            return _final(result, attempts, began, traffic)
        if interrupt.wait(backoff_s):
            attempts[-1] = replace(attempt, restarted=False, verdict="not restarted: interrupted during the back-off")
            listener.stopping("interrupted during the back-off: not restarting")
            return _final(result, attempts, began, traffic)
        last = result
        number += 1


def _final(result: JobResult, attempts: list[Attempt], began: float, traffic: dict[str, tuple[int, int]]) -> JobResult:
    return replace(result, attempts=attempts, elapsed_s=time.monotonic() - began, traffic=traffic)


def run_job(config: JobConfig, remote: RemoteNodes, listener: AttemptListener,
            interrupt: threading.Event | None = None) -> JobResult:
    """Run `config`'s job (other nodes through `remote`, already connected and checked),
    restarting it as `config` allows, until it ends or `interrupt` is set, and return how it
    ended. Everything that happens meanwhile is told to `listener`; what the user sees of it,
    during and after, is the caller's choice."""
    nodes = JobNodes(config.spec, remote)

    def start(number: int) -> JobResult:
        return run_attempt(config, nodes, listener, number, interrupt)

    return run_attempts(start, config.max_restarts, config.restart_backoff_s, listener,
                        unreachable=remote.unreachable, interrupt=interrupt)
