"""adrun.shown_job: the terminal's listener of a job's attempts also tells the jobs registry which
attempt runs (the CLI's `on_attempt`); launch/ itself reports only through the listener."""

from __future__ import annotations

from adrun.launch.job.metrics import Throughput
from adrun.launch.job.restarts import run_attempts
from adrun.launch.job.failures import Failure, TaskKilled
from adrun.launch.job.results import JobResult, TaskOutcome
from adrun.launch.job.tasks import Task
from adrun.shown_job import _View

W0, W1 = Task("worker", 0, "localhost", 2000), Task("worker", 1, "localhost", 2001)


def test_each_attempt_reaches_on_attempt_after_the_view_said_it(capsys):
    killed = Failure(W1, TaskKilled(-9), ["Killed"], step=3)
    results = [JobResult(137, killed, False, Throughput(), [TaskOutcome(W1, 11, -9, False)], 1.0),
               JobResult(0, None, False, Throughput(), [TaskOutcome(W1, 12, 0, False)], 2.0)]
    told: list[tuple[int, str]] = []

    def on_attempt(number: int) -> None:
        told.append((number, capsys.readouterr().err))

    with _View(True, on_attempt) as view:
        result = run_attempts(lambda number: results[number], 2, 0.0, view)

    assert [number for number, _ in told] == [0, 1]
    assert "restart 1 of at most 2: attempt 1 (ADRUN_RESTART_COUNT=1)" in " ".join(told[1][1].split())
    assert result.exit_code == 0 and [a.number for a in result.attempts] == [0, 1]
    assert result.attempts[0].verdict == "restarted: killed by SIGKILL"
