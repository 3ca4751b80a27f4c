"""bench/cluster/cpu_report.py: a run's CPU seconds per step from /proc samples, on made-up samples."""

from __future__ import annotations

import click
import pytest

from bench.cluster.cpu_report import report, segments, steady
from bench.cluster.cpu_sample import role
from bench.cluster.results import BenchResults, RunConfig, RunResult, WorkerResult

CPU0 = {"user": 0, "nice": 0, "system": 0, "idle": 0, "iowait": 0, "irq": 0, "softirq": 0, "steal": 0}


def _sample(t: float, sent: int, procs: dict, busy: int = 0, idle: int = 0) -> dict:
    return {"t": t, "cpu": {**CPU0, "user": busy, "idle": idle}, "sent": sent, "procs": procs}


def _run(steps: int = 100) -> RunResult:
    config = RunConfig(workload="sparse", profile="datacenter", hosts=2, kind="adrun", system="AllReduce")
    return RunResult(config=config, repetition=0, steps=steps, warmup=10, exit_code=0, wall_s=10.0)


def _steady_run() -> list[dict]:
    """Two workers moving 1 MB a step, 10 steps a second for 10 s: each worker 5 ticks (50 ms) of
    CPU per step, the PS task 1 tick, the machine 12 busy ticks and 8 idle per step."""
    return [_sample(i, i * 10_000_000, {"11": ["worker", 50 * i], "12": ["worker", 50 * i], "13": ["ps", 10 * i]},
                    busy=120 * i, idle=80 * i) for i in range(11)]


def test_a_steady_run_gives_cpu_seconds_per_step_over_the_middle_of_its_bytes():
    row = steady(_run(), _steady_run())
    assert row is not None
    assert row.steps == pytest.approx(80)  # the middle 80 % of 100 steps' bytes
    assert row.step_s == pytest.approx(0.1)
    assert row.cpu_s == pytest.approx({"worker": 0.1, "ps": 0.01, "softirq": 0.0, "adrun": 0.0})
    assert (row.busy_s, row.idle_s, row.mb) == pytest.approx((0.12, 0.08, 1.0))


def test_a_brief_start_of_the_workload_script_without_bytes_is_not_a_run():
    """bench.cluster.run starts the script briefly before a run (its check): its samples move no
    bytes and are dropped; samples without workers end a run."""
    check = [_sample(0, 0, {"5": ["worker", 1]}), _sample(0.5, 0, {})]
    run = [dict(s, t=s["t"] + 1) for s in _steady_run()]
    assert [len(part) for part in segments(check + run)] == [11]


def test_samples_and_results_of_different_run_counts_are_refused():
    bench = BenchResults(started="", command="", machine={}, versions={}, profiles=[], runs=[_run(), _run()])
    with pytest.raises(click.UsageError, match="the samples show 1 runs, the results 2"):
        report(_steady_run(), bench)


def test_the_workers_cpu_is_their_own_figure_where_the_results_have_it():
    """Each worker's result file gives its exact CPU seconds over its timed steps: 9 s over 100
    steps and 11 s over 100, 0.2 s a step together, taken over the /proc ticks' 0.1; the PS
    tasks' CPU stays /proc's."""
    run = _run()
    run.workers = [WorkerResult(workload="sparse", worker=i, steps=100, seconds=10.0, batch_size=8,
                                examples_per_s=80.0, steps_per_s=10.0, cpu_seconds=cpu)
                   for i, cpu in enumerate([9.0, 11.0])]
    row = steady(run, _steady_run())
    assert row is not None
    assert (row.cpu_s["worker"], row.cpu_s["ps"]) == pytest.approx((0.2, 0.01))
    run.workers[1].cpu_seconds = None  # an older file: /proc's ticks for all of them
    row = steady(run, _steady_run())
    assert row is not None
    assert row.cpu_s["worker"] == pytest.approx(0.1)


@pytest.mark.parametrize("cmdline, comm, expected", [
    ("python /work/bench/workloads/sparse.py --steps 10", "python", "worker"),
    ("python -m adrun.runtime.ps_server --task 0", "python", "ps"),
    ("python -m adrun.runtime.tf2.ps_task --task 1", "python", "ps"),
    ("", "ksoftirqd/1", "softirq"),
    ("python -m adrun run spec.yaml", "python", "adrun"),
    ("sshd: root@notty", "sshd", "adrun"),
    ("python train.py", "python", None),
])
def test_role_names_each_benchmark_process_and_no_other(cmdline, comm, expected):
    assert role(cmdline, comm) == expected
