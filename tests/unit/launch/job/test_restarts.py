"""Restarts: which failures a restart can cure (a pure rule), and the loop of attempts around
real supervised jobs of tiny `python -c` tasks (no TensorFlow): budget, attempt number in the
environment, nothing of an attempt left when the next starts, unreachable nodes, stalls."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.exit_codes import PLAN_MISMATCH_EXIT_CODE, STALL_EXIT_CODE
from adrun.launch.env import HOOK_DIR, run_context, task_env
from adrun.launch.job.failures import (
    Failure, NodeLost, TaskExited, TaskKilled, TaskRaised, TaskRefused, TaskStalled,
)
from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.report import job_report
from adrun.launch.job.restarts import judge, run_attempts
from adrun.launch.job.supervisor import supervise
from adrun.launch.job.tasks import Task
from adrun.launch.job.teardown import leftover_processes
from adrun.task_events import ErrorEvent, encode
from tests.support.job_configs import job_config
from tests.support.supervision import Recorder

pytestmark = pytest.mark.timeout(90)

W0, W1, PS0 = Task("worker", 0, "localhost", 1), Task("worker", 1, "localhost", 2), Task("ps", 0, "localhost", 3)
TF_MODULE = "tensorflow.python.framework.errors_impl"


def raised(name: str, message: str = "Graph execution error:", tf_error: str | None = None) -> TaskRaised:
    """What a worker's excepthook reports for an exception of class `name` (`tf_error`: the
    tf.errors class TF gave it)."""
    return TaskRaised(1, ErrorEvent(name, message, tf_error))


def tf_raised(tf_error: str, message: str = "Graph execution error:") -> TaskRaised:
    return raised(f"{TF_MODULE}.{tf_error}", message, tf_error)


# --- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize("failure,cause", [
    (Failure(W1, TaskKilled(-9), step=12), "killed by SIGKILL"),
    (Failure(W1, TaskKilled(-11)), "killed by SIGSEGV"),
    (Failure(W1, NodeLost("lost the SSH connection to localhost", 255)), "lost the connection to localhost"),
    (Failure(PS0, raised("OSError", "[Errno 98] Address already in use")), "a parameter server ended"),
    (Failure(PS0, TaskExited(0)), "a parameter server ended"),
    (Failure(W0, TaskStalled("has made no training progress for 60 s"), step=4), "a stalled worker"),
    (Failure(W0, tf_raised("UnavailableError")), "UnavailableError"),
    (Failure(W0, tf_raised("AbortedError")), "AbortedError"),
    (Failure(W0, tf_raised("DeadlineExceededError")), "DeadlineExceededError"),
    # TF's class is decided in the task from the error code: a subclass of a script's own is TF's class
    (Failure(W0, raised("my_model.PeerGone", "gone", tf_error="UnavailableError")), "UnavailableError"),
])
def test_failures_a_restart_can_cure(failure, cause):
    verdict = judge(failure)
    assert verdict.restart, verdict
    assert cause in verdict.reason


@pytest.mark.parametrize("failure,why", [
    (Failure(W1, TaskRefused(PLAN_MISMATCH_EXIT_CODE, "the graph's fingerprint differs")),
     "the script built a different graph than the one planned"),
    (Failure(W1, raised("RuntimeError", "boom from w1")), "the script raised RuntimeError: an error in the script"),
    (Failure(W1, tf_raised("InvalidArgumentError")), "the script raised InvalidArgumentError"),
    (Failure(W1, raised("KeyboardInterrupt", "")), "the script raised KeyboardInterrupt"),
    # a class named like TF's that TF did not raise (no tf_error) is the script's own
    (Failure(W1, raised(f"{TF_MODULE}.UnavailableError", "fake")), "the script raised UnavailableError"),
    (Failure(W0, TaskExited(3)), "the script exited with code 3"),
    (Failure(W0, TaskExited(PLAN_MISMATCH_EXIT_CODE)), f"the script exited with code {PLAN_MISMATCH_EXIT_CODE}"),
])
def test_failures_of_the_script_are_not_restarted(failure, why):
    verdict = judge(failure)
    assert not verdict.restart
    assert verdict.reason.startswith(why), verdict.reason


def test_the_same_failure_at_the_same_step_twice_in_a_row_is_not_restarted():
    first = Failure(W1, tf_raised("AbortedError", "step aborted by localhost:20001"), step=7)
    again = Failure(W1, tf_raised("AbortedError", "step aborted by localhost:31337"), step=7)
    verdict = judge(again, first)
    assert not verdict.restart
    assert verdict.reason == ("w1 failed the same way at step 7 in the attempt before (TensorFlow's AbortedError: a "
                              "peer died, did not answer or aborted the step); a restart would repeat it")
    # Anything different is another failure: another step, task or way of ending.
    assert judge(Failure(W1, tf_raised("AbortedError"), step=8), first).restart
    assert judge(Failure(W0, tf_raised("AbortedError"), step=7), first).restart
    assert judge(Failure(W1, tf_raised("UnavailableError"), step=7), first).restart
    assert judge(Failure(W1, TaskKilled(-9), step=7), first).restart
    assert not judge(Failure(PS0, TaskKilled(-9)), Failure(PS0, TaskKilled(-9))).restart
    stalled = Failure(W1, TaskStalled("has made no training progress for 61 s"), step=7)
    assert not judge(stalled, Failure(W1, TaskStalled("has made no training progress for 75 s"), step=7)).restart


# --- the loop, around real jobs -------------------------------------------------------------------


# A worker that reports `steps` steps, then does what its attempt's entry in `plan` says:
# {attempt: {worker: "kill" | "raise" | "hang"}}; a worker with nothing to do exits 0.
WORKER = """
    import json, os, signal, sys, time
    plan = {plan!r}
    attempt, me = os.environ["ADRUN_RESTART_COUNT"], os.environ["ADRUN_WORKER_INDEX"]
    print("attempt", attempt, "pid", os.getpid(), flush=True)
    for step in range(1, {steps} + 1):
        print("@@ADRUN " + json.dumps({{"event": "step", "step": step, "time": time.time()}}), file=sys.stderr, flush=True)
    what = plan.get(attempt, {{}}).get(me)
    if what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "raise":
        raise RuntimeError("boom in attempt " + attempt)
    if what == "hang":
        time.sleep(600)
"""


def _launches(job_id: str, tmp_path: Path, attempt: int, plan: dict[str, dict[str, str]], steps: int = 3):
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    launches = []
    for index in (0, 1):
        task = Task("worker", index, "localhost", index + 1)
        context = run_context(task, job_id, 2, cluster, strategy_file=None, restart_count=attempt)
        env = task_env(context, os.environ, hook_dir=str(HOOK_DIR))  # adrun's hook reports an exception
        code = textwrap.dedent(WORKER.format(plan=plan, steps=steps))
        launches.append(TaskLaunch(task, [sys.executable, "-c", code], env, tmp_path))
    return launches


def _run(job_id, tmp_path, plan, max_restarts, **kwargs):
    """run_attempts over real jobs following `plan`, without back-off; also returns the pids of the
    job's processes found alive before each attempt started."""
    leftovers: list[list[int]] = []
    listener = Recorder()

    def start(attempt: int):
        leftovers.append([p.pid for p in leftover_processes(job_id)])
        return supervise(_launches(job_id, tmp_path, attempt, plan), job_config(job_id, grace_s=2.0), listener)

    result = run_attempts(start, max_restarts, 0.0, listener, **kwargs)
    return result, listener, leftovers


def test_a_killed_worker_is_restarted_with_the_next_attempt_number_and_nothing_of_the_first_left(job_id, tmp_path):
    result, listener, leftovers = _run(job_id, tmp_path, {"0": {"1": "kill"}}, max_restarts=2)

    assert result.exit_code == 0 and result.failed is None
    assert listener.started == [0, 1] and listener.ended == [(0, 0.0), (1, None)]
    first, second = result.attempts
    assert (first.number, first.exit_code, first.restarted, first.steps) == (0, 137, True, 6)
    assert first.failed.summary == "w1 (worker 1 on localhost) was killed by SIGKILL"
    assert first.verdict == "restarted: killed by SIGKILL"
    assert (second.number, second.exit_code, second.failed, second.verdict) == (1, 0, None, None)
    assert leftovers == [[], []]  # no process of the job alive when each attempt started
    assert leftover_processes(job_id) == []
    # The report keeps every attempt; its top level is the last one.
    report = job_report(result, job_id, "PS", tmp_path / "s.yml")
    assert [(a.attempt, a.exit_code, a.root_cause, a.restarted) for a in report.attempts] == [
        (0, 137, "w1 (worker 1 on localhost) was killed by SIGKILL", True), (1, 0, None, False)]
    assert (report.exit_code, report.succeeded, report.root_cause) == (0, True, None)


def test_a_budget_of_one_with_two_failures_ends_with_the_second_root_cause(job_id, tmp_path):
    result, listener, _ = _run(job_id, tmp_path, {"0": {"1": "kill"}, "1": {"0": "kill"}}, max_restarts=1)

    assert result.exit_code == 137
    assert result.failed.summary == "w0 (worker 0 on localhost) was killed by SIGKILL"
    assert [a.failed.task.tag for a in result.attempts] == ["w1", "w0"]
    assert result.attempts[1].verdict == ("not restarted: killed by SIGKILL, but the restart budget "
                                          "(--max-restarts 1) is used up")
    assert leftover_processes(job_id) == []


def test_an_exception_of_the_script_is_not_restarted(job_id, tmp_path):
    result, listener, _ = _run(job_id, tmp_path, {"0": {"1": "raise"}}, max_restarts=3)

    assert result.exit_code == 1 and listener.started == [0]
    assert result.failed.cause == TaskRaised(1, ErrorEvent("RuntimeError", "boom in attempt 0"))
    assert result.attempts[0].verdict.startswith("not restarted: the script raised RuntimeError")


def test_a_node_that_cannot_be_reached_ends_the_job_by_name(job_id, tmp_path):
    asked = []

    def unreachable():
        asked.append(True)
        return ["node 10.0.0.3 cannot be reached: no answer from 10.0.0.3:22 within 10 s"]

    result, listener, _ = _run(job_id, tmp_path, {"0": {"1": "kill"}}, max_restarts=5, unreachable=unreachable)

    assert listener.started == [0] and asked == [True]
    assert result.exit_code == 137
    assert result.attempts[0].verdict == ("not restarted: killed by SIGKILL, but node 10.0.0.3 cannot be reached: "
                                          "no answer from 10.0.0.3:22 within 10 s")


def test_a_restart_that_cannot_start_ends_with_the_failure_before(job_id, tmp_path):
    def start(attempt):
        if attempt:
            raise UserError("port 23000 on node-b is already in use")
        launches = _launches(job_id, tmp_path, attempt, {"0": {"0": "kill"}})
        return supervise(launches, job_config(job_id, grace_s=2.0), listener)

    listener = Recorder()
    result = run_attempts(start, 1, 0.0, listener)

    assert result.exit_code == 137 and result.failed.task.tag == "w0"
    assert result.attempts[0].verdict == "not restarted: the restart failed: port 23000 on node-b is already in use"
    assert listener.warnings == ["the restart failed: port 23000 on node-b is already in use"]


def test_an_interrupted_back_off_does_not_restart(job_id, tmp_path):
    interrupt = threading.Event()
    interrupt.set()  # as the CLI's handler does on Ctrl-C; attempt 0's supervisor is not told (see _run)
    result, listener, _ = _run(job_id, tmp_path, {"0": {"1": "kill"}}, max_restarts=1, interrupt=interrupt)

    assert listener.started == [0] and result.exit_code == 137
    assert result.attempts[0].verdict == "not restarted: interrupted during the back-off"


# --- stalls ------------------------------------------------------------------------------------


def test_on_stall_fail_names_the_worker_outside_a_step_that_the_others_wait_for(job_id, tmp_path):
    # w0 stops first, but inside a step (its runtime reports it waiting); w1 stops later, outside
    # any step: w1 is what a synchronous step waits for.
    waited = tmp_path / "w0-waiting"
    waiting = f"""
        import json, pathlib, sys, time
        for step in range(1, 4):
            print("@@ADRUN " + json.dumps({{"event": "step", "step": step, "time": time.time()}}), file=sys.stderr, flush=True)
        began = time.time()
        print("@@ADRUN " + json.dumps({{"event": "waiting", "step": 3, "time": began + 2, "since": began}}),
              file=sys.stderr, flush=True)
        pathlib.Path({str(waited)!r}).touch()
        time.sleep(600)
    """
    stuck = f"""
        import json, pathlib, sys, time
        while not pathlib.Path({str(waited)!r}).exists():
            time.sleep(0.05)
        time.sleep(0.5)
        print("@@ADRUN " + json.dumps({{"event": "step", "step": 3, "time": time.time()}}), file=sys.stderr, flush=True)
        time.sleep(600)
    """
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    launches = []
    for index, code in ((0, waiting), (1, stuck)):
        task = Task("worker", index, "localhost", index + 1)
        env = task_env(run_context(task, job_id, 2, cluster, strategy_file=None), os.environ, hook_dir=str(tmp_path))
        env.pop("ADRUN_MODE")
        launches.append(TaskLaunch(task, [sys.executable, "-c", textwrap.dedent(code)], env, tmp_path))
    listener = Recorder()

    result = supervise(launches, job_config(job_id, stall_timeout_s=2.0, on_stall="fail", grace_s=2.0), listener)

    assert result.exit_code == STALL_EXIT_CODE
    failure = result.failed
    assert (failure.task.tag, failure.returncode, failure.step) == ("w1", None, 3)
    assert re.fullmatch(r"w1 \(worker 1 on localhost\) has made no training progress for \d+ s \(still at step 3, "
                        r"outside any training step\); other workers: w0 at step 3, waiting in step 4 for \d+ s; its "
                        r"script is busy or hung outside TensorFlow, and the others wait for it", failure.summary), \
        failure.summary
    assert listener.warnings == []
    assert listener.stops[0].endswith(": stopping the job (--on-stall fail)")
    assert all(o.stopped for o in result.outcomes)
    assert judge(failure).restart
    assert leftover_processes(job_id) == []


def test_the_error_a_task_reports_is_read_however_long_its_traceback(job_id, tmp_path):
    """The task reports its exception as an event (as the runtime's excepthook does, with TF's
    class decided where the exception object exists); the supervisor reads its fields, even when
    the traceback's text runs on for more lines than the stderr tail keeps."""
    event = ErrorEvent(f"{TF_MODULE}.UnavailableError", "Socket closed", "UnavailableError")
    code = f"""
        import sys
        print("Traceback (most recent call last):", file=sys.stderr)
        print("tensorflow.python.framework.errors_impl.UnavailableError: Socket closed", file=sys.stderr)
        print("\\n".join(f"  detail line {{i}}" for i in range(60)), file=sys.stderr)
        sys.stderr.write({encode(event)!r})
        sys.exit(1)
    """
    task = Task("worker", 0, "localhost", 1)
    context = run_context(task, job_id, 1, {"worker": ["localhost:1"]}, strategy_file=None)
    env = task_env(context, os.environ, hook_dir=str(tmp_path))
    env.pop("ADRUN_MODE")
    launch = TaskLaunch(task, [sys.executable, "-c", textwrap.dedent(code)], env, tmp_path)

    result = supervise([launch], job_config(job_id), Recorder())

    assert "UnavailableError" not in "\n".join(result.failed.stderr_tail)  # the tail alone lost it
    assert result.failed.cause == TaskRaised(1, event)
    assert judge(result.failed).restart
    report = job_report(result, job_id, "PS", tmp_path / "s.yml")
    assert (report.root_cause_kind, report.root_cause_exception) == ("raised", f"{TF_MODULE}.UnavailableError")


def _workers(job_id: str, tmp_path: Path, *codes: str) -> list[TaskLaunch]:
    cluster = {"worker": [f"localhost:{i + 1}" for i in range(len(codes))]}
    launches = []
    for index, code in enumerate(codes):
        task = Task("worker", index, "localhost", index + 1)
        context = run_context(task, job_id, len(codes), cluster, strategy_file=None)
        env = task_env(context, os.environ, hook_dir=str(tmp_path))
        env.pop("ADRUN_MODE")
        launches.append(TaskLaunch(task, [sys.executable, "-c", textwrap.dedent(code)], env, tmp_path))
    return launches


STEPS_AFTER = """
    import json, sys, time
    time.sleep({startup})
    for step in range(1, {steps} + 1):
        print("@@ADRUN " + json.dumps({{"event": "step", "step": step, "time": time.time()}}), file=sys.stderr, flush=True)
        time.sleep(0.1)
    time.sleep({then})
"""


def test_start_up_longer_than_the_stall_timeout_is_no_stall(job_id, tmp_path):
    # both workers take 2.5 s to start, longer than the 1.5 s timeout; w1 takes its one step once w0
    # stepped (its start-up is no stall either), then stops; w0 steps on until the job is stopped
    stepping = tmp_path / "w0-stepping"
    w0 = f"""
        import json, pathlib, sys, time
        time.sleep(2.5)
        for step in range(1, 100000):
            print("@@ADRUN " + json.dumps({{"event": "step", "step": step, "time": time.time()}}), file=sys.stderr, flush=True)
            pathlib.Path({str(stepping)!r}).touch()
            time.sleep(0.1)
    """
    w1 = f"""
        import json, pathlib, sys, time
        time.sleep(2.5)
        while not pathlib.Path({str(stepping)!r}).exists():
            time.sleep(0.05)
        print("@@ADRUN " + json.dumps({{"event": "step", "step": 1, "time": time.time()}}), file=sys.stderr, flush=True)
        time.sleep(600)
    """
    listener = Recorder()

    result = supervise(_workers(job_id, tmp_path, w0, w1),
                       job_config(job_id, stall_timeout_s=1.5, on_stall="fail", grace_s=2.0), listener)

    assert result.failed.task.tag == "w1" and result.failed.step == 1, result.failed
    assert "(still at step 1, outside any training step)" in result.failed.cause.detail


def test_a_worker_that_never_starts_training_while_the_others_do_is_a_stall(job_id, tmp_path):
    # w1's clock starts at w0's first step; w0 steps on until the job is stopped: w1 is the one named
    w0 = STEPS_AFTER.format(startup=0, steps=100000, then=0)

    result = supervise(_workers(job_id, tmp_path, w0, "import time; time.sleep(600)"),
                       job_config(job_id, stall_timeout_s=1.5, on_stall="fail", grace_s=2.0), Recorder())

    assert result.failed.task.tag == "w1" and result.failed.step is None
    detail = result.failed.cause.detail
    assert detail.startswith("has made no training progress for ")
    assert re.search(r"\(no step yet\); other workers: w0 at step \d+, outside any training step; it has not "
                     r"started training while others have \(still building its graph\?\)", detail), detail


# --- the flags -----------------------------------------------------------------------------------


@pytest.mark.parametrize("args,message", [
    (["--max-restarts", "-1"], "Invalid value for '--max-restarts': -1 is not in the range 0<=x<=1000."),
    (["--max-restarts", "two"], "Invalid value for '--max-restarts': 'two' is not a valid integer range."),
    (["--restart-backoff", "-5"], "Invalid value for '--restart-backoff': -5.0 is not in the range 0<=x<=86400."),
    (["--on-stall", "kill"], "Invalid value for '--on-stall': 'kill' is not one of 'warn', 'fail'."),
])
def test_impossible_restart_and_stall_settings_are_refused_before_anything_runs(args, message, tmp_path):
    from click.testing import CliRunner

    from adrun.cli import main

    result = CliRunner().invoke(main, [*args, str(tmp_path / "train.py")])
    assert result.exit_code == 2
    assert message in result.output, result.output
