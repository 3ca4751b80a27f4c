"""Supervising jobs of tiny `python -c` tasks: success, failures, metrics, logs, teardown."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from adrun.env_vars import Settings
from adrun.errors import UserError
from adrun.exit_codes import STALL_EXIT_CODE
from adrun.launch.job.failures import TaskExited, TaskKilled
from adrun.launch.job.plan import TaskLaunch
from adrun.launch.job.supervisor import supervise
from adrun.launch.job.teardown import leftover_processes
from tests.support.job_configs import job_config
from tests.support.supervision import SLEEP, Recorder

pytestmark = pytest.mark.timeout(60)

def _gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_success_when_all_workers_exit_0_and_ps_is_stopped(make, job_id):
    rec = Recorder()
    worker = "import os; print('hello from', os.environ['ADRUN_WORKER_INDEX'])"
    launches = [make("worker", 0, worker), make("worker", 1, worker), make("ps", 0, SLEEP)]

    result = supervise(launches, job_config(job_id), rec)

    assert result.exit_code == 0 and result.failed is None and not result.interrupted
    assert [t.tag for t in rec.tasks] == ["ps0", "w0", "w1"]  # PS started first
    assert ("w0", "stdout", "hello from 0") in rec.lines
    assert ("w1", "stdout", "hello from 1") in rec.lines
    outcomes = {o.task.tag: o for o in result.outcomes}
    assert outcomes["w0"].returncode == 0 and not outcomes["w0"].stopped
    assert outcomes["ps0"].stopped and outcomes["ps0"].signal_name == "SIGTERM"
    assert _gone([o.pid for o in result.outcomes]) and leftover_processes(job_id) == []


def test_failing_worker_stops_its_siblings_and_is_the_root_cause(make, job_id):
    rec = Recorder()
    failing = """
        import sys, time
        time.sleep(0.3)
        print("step 1 ok", file=sys.stderr)
        print("boom: disk on fire", file=sys.stderr)
        sys.exit(3)
    """
    launches = [make("worker", 0, SLEEP), make("worker", 1, failing), make("ps", 0, SLEEP)]

    # w0 and ps0 sleep for 600 s: that supervise returns at all means it stopped them
    result = supervise(launches, job_config(job_id), rec)

    assert result.exit_code == 3
    assert result.failed is not None
    assert result.failed.task.tag == "w1" and result.failed.task.role == "worker"
    assert result.failed.cause == TaskExited(3) and result.failed.returncode == 3
    assert result.failed.stderr_tail[-2:] == ["step 1 ok", "boom: disk on fire"]
    assert "w1 (worker 1 on localhost) exited with code 3" in rec.stops[0]
    assert _gone([o.pid for o in result.outcomes]) and leftover_processes(job_id) == []
    assert {o.task.tag for o in result.outcomes if o.stopped} == {"w0", "ps0"}


def test_sibling_ignoring_sigterm_is_killed_after_the_grace(make, job_id, tmp_path):
    """The failing worker fails only once the stubborn one ignores SIGTERM (it says so with a file),
    so the SIGTERM surely finds it ignoring; SIGKILL after the grace is what ends it."""
    ignoring = tmp_path / "ignoring-sigterm"
    stubborn = f"""
        import pathlib, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pathlib.Path({str(ignoring)!r}).touch()
        time.sleep(600)
    """
    failing = f"""
        import pathlib, sys, time
        while not pathlib.Path({str(ignoring)!r}).exists():
            time.sleep(0.05)
        sys.exit(1)
    """
    launches = [make("worker", 0, stubborn), make("worker", 1, failing)]

    result = supervise(launches, job_config(job_id, grace_s=1.0), Recorder())

    assert result.failed.task.tag == "w1"
    stubborn_outcome = next(o for o in result.outcomes if o.task.tag == "w0")
    assert stubborn_outcome.stopped and stubborn_outcome.signal_name == "SIGKILL"
    assert leftover_processes(job_id) == []


def test_worker_killed_by_a_signal_is_reported_by_signal_name(make, job_id):
    code = "import os, signal, time; time.sleep(0.2); os.kill(os.getpid(), signal.SIGKILL)"
    result = supervise([make("worker", 0, code), make("ps", 0, SLEEP)], job_config(job_id), Recorder())

    assert result.failed.task.tag == "w0"
    assert result.failed.cause == TaskKilled(-9) and result.failed.cause.signal == "SIGKILL"
    assert result.exit_code == 128 + 9


def test_ps_exiting_by_itself_fails_the_job(make, job_id):
    result = supervise([make("worker", 0, SLEEP), make("ps", 0, "import time; time.sleep(0.3)")], job_config(job_id), Recorder())

    assert result.failed.task.tag == "ps0"
    assert result.failed.cause == TaskExited(0)
    assert result.exit_code == 1
    assert "while the workers were still running" in result.failed.summary


def test_metric_lines_are_parsed_and_not_shown(make, job_id):
    rec = Recorder()
    code = """
        import json, sys
        def metric(step, t):
            print("@@ADRUN " + json.dumps({"event": "step", "step": step, "time": t, "examples": 8}), file=sys.stderr)
        metric(1, 1000.0)
        print("training...", file=sys.stderr)
        metric(21, 1002.0)
        print("@@ADRUN not-json", file=sys.stderr)
    """
    result = supervise([make("worker", 0, code)], job_config(job_id), rec)

    assert result.exit_code == 0
    assert rec.lines == [("w0", "stderr", "training..."), ("w0", "stderr", "@@ADRUN not-json")]
    assert result.metrics.workers[0].steps == 21
    assert result.metrics.steps_per_s == pytest.approx(10.0)
    assert result.metrics.examples_per_s == pytest.approx(80.0)


def test_quiet_hides_lines_but_keeps_the_stderr_tail(make, job_id):
    rec = Recorder()
    code = "import sys; print('noisy'); print('why it broke', file=sys.stderr); sys.exit(2)"
    result = supervise([make("worker", 0, code)], job_config(job_id, quiet=True), rec)

    assert rec.lines == []
    assert result.failed.stderr_tail == ["why it broke"]


def test_log_dir_has_one_file_per_task_with_both_streams(make, job_id, tmp_path):
    code = """
        import sys
        print("out line")
        print("@@ADRUN " + '{"event": "step", "step": 1, "time": 1.0}', file=sys.stderr)
        print("err line", file=sys.stderr)
    """
    ps = "import time; print('ps up', flush=True); time.sleep(600)"
    log_dir = tmp_path / "logs"
    result = supervise([make("worker", 0, code), make("ps", 0, ps)], job_config(job_id, log_dir=log_dir), Recorder())

    assert result.exit_code == 0
    assert sorted(p.name for p in log_dir.iterdir()) == ["ps0.log", "w0.log"]
    assert sorted((log_dir / "w0.log").read_text().splitlines()) == ["err line", "out line"]
    assert (log_dir / "ps0.log").read_text() == "ps up\n"


def test_a_task_that_cannot_start_is_a_user_error_and_started_tasks_are_stopped(make, job_id):
    ps = make("ps", 0, SLEEP)
    broken = make("worker", 0, "pass")
    broken = TaskLaunch(broken.task, ["/nonexistent/python3", "x.py"], broken.env, broken.cwd)

    with pytest.raises(UserError, match="cannot start w0 on localhost: /nonexistent/python3"):
        supervise([ps, broken], job_config(job_id), Recorder())
    assert leftover_processes(job_id) == []


CAPTURED_STDERR = Path(__file__).parent / "tf_stderr" / "adrun_worker_raises.txt"  # 7 noise lines, then 8 kept


def test_tensorflow_startup_noise_is_folded_and_stays_out_of_the_root_cause(make, job_id, tmp_path):
    """A worker whose stderr is a real failed worker's (TF's start-up lines, then its traceback)."""
    captured = CAPTURED_STDERR.read_text().splitlines()
    code = f"import sys; sys.stderr.write(open({str(CAPTURED_STDERR)!r}).read()); sys.exit(1)"
    rec = Recorder()
    result = supervise([make("worker", 0, code)], job_config(job_id, log_dir=tmp_path / "logs"), rec)

    assert result.failed.stderr_tail == captured[7:]
    assert result.failed.stderr_tail[-1] == "RuntimeError: boom from w1"
    assert rec.folds == [("w0", 7)]
    assert rec.events[0] == ("folded", "w0") and [line for _, _, line in rec.lines] == captured[7:]
    assert (tmp_path / "logs" / "w0.log").read_text().splitlines() == captured

    rec = Recorder()
    result = supervise([make("worker", 0, code)], job_config(job_id, show_tf_noise=True), rec)
    assert [line for _, _, line in rec.lines] == captured
    assert rec.folds == [] and result.failed.stderr_tail == captured[7:]


def test_folded_noise_is_counted_once_per_run_of_noise(make, job_id):
    code = """
        import sys
        noise = "I0000 00:00:1795386586.349890   15539 cudart_stub.cc:31] Could not find cuda drivers on your machine"
        for line in (noise, noise, "@@ADRUN " + '{"event": "step", "step": 1, "time": 1.0}', noise, "shown", noise):
            print(line, file=sys.stderr)
        sys.exit(4)
    """
    rec = Recorder()
    result = supervise([make("worker", 0, code)], job_config(job_id), rec)

    # The first count at the step, the second before the shown line, the last at the end.
    assert rec.folds == [("w0", 2), ("w0", 1), ("w0", 1)]
    assert [line for _, _, line in rec.lines] == result.failed.stderr_tail == ["shown"]


def test_the_root_cause_keeps_the_last_lines_on_stdout(make, job_id):
    code = "import os\nfor i in range(7): print(f'out {i}')\nos._exit(5)"
    result = supervise([make("worker", 0, code)], job_config(job_id), Recorder())

    assert result.failed.stdout_tail == [f"out {i}" for i in range(2, 7)]


# --- the finish barrier of a bounded run (launch/job/finish_barrier.py) ---------------------------

# A worker's code, one statement a line: it ran its last step when it reaches FINISH, where it waits
# at the finish barrier as the runtime does (adrun/runtime/finish.py) until the launcher releases it.
FINISH = 'wait_for_release(int(os.environ["ADRUN_RELEASE_FD"]), 5, 0.0)'


def _code(*lines: str) -> str:
    return "\n".join(("import os, pathlib, sys, time", "from adrun.runtime.finish import wait_for_release", *lines))


def _touch(path: Path) -> str:
    return f"pathlib.Path({str(path)!r}).touch()"


def _wait_for(path: Path) -> str:
    return f"while not pathlib.Path({str(path)!r}).exists(): time.sleep(0.05)"


def test_a_finished_worker_is_released_only_once_every_worker_finished(make, job_id, tmp_path):
    """w1 finishes only after w0 waits, leaving a file first: w0, released, finds it."""
    w0_waits, w1_done = tmp_path / "w0-waits", tmp_path / "w1-done"
    w0 = _code(_touch(w0_waits), FINISH, f"print('released, w1 done:', pathlib.Path({str(w1_done)!r}).exists())")
    w1 = _code(_wait_for(w0_waits), _touch(w1_done), FINISH)
    rec = Recorder()

    result = supervise([make("worker", 0, w0), make("worker", 1, w1), make("ps", 0, SLEEP)], job_config(job_id), rec)

    assert result.exit_code == 0, rec.lines
    assert ("w0", "stdout", "released, w1 done: True") in rec.lines
    outcomes = {o.task.tag: o for o in result.outcomes}
    assert [(outcomes[t].returncode, outcomes[t].stopped) for t in ("w0", "w1")] == [(0, False), (0, False)]
    assert _gone([o.pid for o in result.outcomes]) and leftover_processes(job_id) == []


def test_a_worker_that_never_finishes_fails_the_barrier_after_the_op_timeout(make, job_id):
    rec = Recorder()
    launches = [make("worker", 0, _code(FINISH)), make("worker", 1, SLEEP)]

    result = supervise(launches, job_config(job_id, settings=Settings(op_timeout_s=0.5)), rec)

    assert result.exit_code == STALL_EXIT_CODE
    assert result.failed.task.tag == "w1" and result.failed.cause.stopped_by == "ADRUN_OP_TIMEOUT at the finish barrier"
    assert rec.stops == ["w1 (worker 1 on localhost) did not finish its bounded run within ADRUN_OP_TIMEOUT (0.5 s) "
                         "after w0 finished its last step; workers that never finished: w1 (the finished workers "
                         "waited for them at the finish barrier): stopping the job"]
    assert {o.task.tag for o in result.outcomes if o.stopped} == {"w0", "w1"}
    assert _gone([o.pid for o in result.outcomes]) and leftover_processes(job_id) == []


def test_a_worker_dying_while_another_waits_fails_the_job_and_leaves_nothing(make, job_id, tmp_path):
    w0_waits = tmp_path / "w0-waits"
    launches = [make("worker", 0, _code(_touch(w0_waits), FINISH)), make("worker", 1, _code(_wait_for(w0_waits), "sys.exit(3)"))]

    result = supervise(launches, job_config(job_id), Recorder())

    assert result.exit_code == 3 and result.failed.task.tag == "w1" and result.failed.cause == TaskExited(3)
    assert {o.task.tag for o in result.outcomes if o.stopped} == {"w0"}
    assert _gone([o.pid for o in result.outcomes]) and leftover_processes(job_id) == []
