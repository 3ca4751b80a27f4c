"""adrun.ui renders launcher data: errors, the root-cause block, the summary, live task output."""

from __future__ import annotations


import pytest

from adrun import ui
from adrun.launch.job.failures import Failure, TaskExited, TaskKilled, TaskRaised, TaskRefused
from adrun.launch.job.metrics import Throughput
from adrun.launch.job.results import JobResult, TaskOutcome
from adrun.launch.job.supervisor import supervise
from adrun.launch.job.tasks import Task
from adrun.launch.job.teardown import kill_leftovers
from adrun.task_events import ErrorEvent, StepEvent
from tests.support.adrun_cli import new_job_id
from tests.support.job_configs import job_config
from tests.support.supervision import python_task

pytestmark = pytest.mark.timeout(30)

W0, W1, PS0 = Task("worker", 0, "localhost", 2000), Task("worker", 1, "node-b", 2001), Task("ps", 0, "localhost", 2002)


def test_user_error_is_one_red_line_on_stderr(capsys):
    ui.print_user_error("cluster.yml: nodes[0].workers: must be >= 0")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "adrun: error: cluster.yml: nodes[0].workers: must be >= 0\n"


def test_failure_block_names_task_host_signal_and_last_stderr_lines(capsys):
    ui.print_failure(Failure(W1, TaskKilled(-9), ["Traceback (most recent call last):", "MemoryError"]))
    err = capsys.readouterr().err
    for expected in ("root cause: w1 failed", "w1 (worker 1)", "node-b", "killed by SIGKILL", "MemoryError"):
        assert expected in err


def test_failure_block_shows_the_last_output_then_the_traceback_last(capsys):
    ui.print_failure(Failure(W0, TaskRaised(1, ErrorEvent("ValueError", "bad batch")),
                             ["Traceback (most recent call last):", "ValueError: bad batch"],
                             ["step 41", "loading shard 3"]))
    err = capsys.readouterr().err
    order = [err.index(text) for text in ("last output lines:", "step 41", "loading shard 3", "last stderr lines",
                                          "start-up messages left out", "ValueError: bad batch")]
    assert order == sorted(order), err


def test_failure_block_shows_the_exit_code(capsys):
    ui.print_failure(Failure(W0, TaskExited(3)))
    err = capsys.readouterr().err
    assert "code 3" in err and "(nothing on stderr)" in err


def test_failure_block_names_what_the_task_reported(capsys):
    ui.print_failure(Failure(W0, TaskRaised(1, ErrorEvent("tensorflow.python.framework.errors_impl.AbortedError",
                                                          "step aborted", "AbortedError"))))
    ui.print_failure(Failure(W1, TaskRefused(65, "the graph's fingerprint differs from the plan's")))
    err = " ".join(capsys.readouterr().err.split())
    assert "raised tensorflow.python.framework.errors_impl.AbortedError" in err
    assert "code 65" in err and "refused the graph's fingerprint differs from the plan's" in err


def test_summary_has_a_row_per_task_and_a_cluster_total(capsys):
    metrics = Throughput()
    for worker, (step0, step1) in enumerate([(1, 11), (1, 21)]):
        metrics.record(worker, StepEvent(step0, 0.0, examples=4))
        metrics.record(worker, StepEvent(step1, 2.0, examples=4))
    outcomes = [TaskOutcome(PS0, 1, -15, True), TaskOutcome(W0, 2, 0, False), TaskOutcome(W1, 3, 0, False)]
    ui.print_summary(JobResult(0, None, False, metrics, outcomes, 12.34))

    lines = capsys.readouterr().err.splitlines()
    cells = [[c.strip() for c in line.strip("│ ").split("│")] for line in lines if line.startswith("│")]
    rows = {row[0]: row[1:] for row in cells}
    assert rows["ps0"] == ["ps", "stopped", "-", "-", "-"]
    assert rows["w1"] == ["worker", "0", "21", "10.0", "40.0"]
    assert rows["cluster"] == ["", "0", "32", "15.0", "60.0"]
    assert any("wall time 12.3 s" in line for line in lines)


def test_plan_table_shows_each_variable_with_size_and_sync(capsys):
    from adrun.graph_item import GraphItem
    from adrun.spec import default_local_spec
    from adrun.strategies.document import Strategy

    variables = [
        {"name": "dense/kernel", "shape": [784, 10], "dtype": "float32", "grad": "dense",
         "sync": {"kind": "ps", "ps_task": 0, "sync": False}},
        {"name": "emb", "shape": [1000, 16], "dtype": "float32", "grad": "sparse",
         "sync": {"kind": "allreduce", "group": 1}},
    ]
    item = GraphItem.model_validate({"variables": [
        {k: v for k, v in var.items() if k != "sync"} | {"trainable": True} for var in variables
    ]})
    plan = Strategy.model_validate({
        "version": 1, "builder": "Mixed", "fingerprint": item.fingerprint, "num_workers": 2, "num_ps": 1,
        "variables": variables,
    })
    ui.print_plan(plan, item, default_local_spec())

    err = capsys.readouterr().err
    assert "strategy Mixed: 2 workers, 1 PS" in err
    assert "ps0 (async)" in err and "30.6 KiB" in err
    assert "allreduce group 1" in err and "62.5 KiB" in err
    assert "cluster: localhost (2 workers, 1 PS)" in err
    assert "in-graph replicas" not in err  # one replica per worker: nothing to say

    plan.replica_devices = [["CPU:0", "CPU:1"], ["CPU:0", "CPU:1"], ["CPU:0"]]
    ui.print_plan(plan, item, None)
    assert "in-graph replicas: w0-w1: CPU:0 CPU:1 · w2: CPU:0" in capsys.readouterr().err


def test_plan_table_names_the_shards_a_script_will_see(capsys, monkeypatch):
    """Under partitioning `tf.trainable_variables()` lists TF's shards: the table says which."""
    from rich.console import Console

    from adrun.strategies.document import Strategy

    monkeypatch.setattr(ui, "console", Console(stderr=True, width=160))  # one line per row

    ps = {"kind": "ps", "ps_task": 0}
    plan = Strategy.model_validate({
        "version": 1, "builder": "PartitionedPS", "fingerprint": "f", "num_workers": 2, "num_ps": 1,
        "variables": [
            {"name": "emb", "shape": [9, 4], "dtype": "float64", "grad": "sparse",
             "partition": {"axis": 0, "shards": [ps, ps, ps]}},
            {"name": "w", "shape": [4, 2], "dtype": "float32", "grad": "dense", "partition": {"axis": 1, "shards": [ps, ps]}},
            {"name": "b", "shape": [-1], "dtype": "float32", "grad": "dense", "sync": ps,
             "note": "kept whole: the size of axis 0 is unknown"},
        ],
    })
    ui.print_plan(plan, None, None)

    rows = {line.split("│")[1].strip(): line for line in capsys.readouterr().err.splitlines() if line.count("│") > 2}
    assert "emb → emb/part_0..part_2" in rows
    assert "w → w/part_0..part_1" in rows
    assert "b" in rows  # kept whole: no shard names
    assert plan.variables[0].shard_names() == ["emb/part_0", "emb/part_1", "emb/part_2"]
    assert plan.variables[2].shard_names() == ["b"]


def test_job_view_prints_tagged_task_lines_and_no_metric_lines(tmp_path, capsys):
    job_id = new_job_id()
    code = (
        "import sys\n"
        "print('hello')\n"
        "print('@@ADRUN {\"event\": \"step\", \"step\": 1, \"time\": 1.0}', file=sys.stderr)\n"
        "print('warning: x', file=sys.stderr)\n"
    )
    launch = python_task(W0, job_id, code, tmp_path, {"worker": [W0.address]}, num_workers=1)
    try:
        with ui.JobView() as view:
            result = supervise([launch], job_config(job_id), view)
    finally:
        kill_leftovers(job_id)

    captured = capsys.readouterr()
    assert result.exit_code == 0
    assert sorted(captured.out.splitlines()) == ["[w0] hello", "[w0] warning: x"]
    assert "@@ADRUN" not in captured.out + captured.err
    assert f"job {job_id}: w0 localhost:2000" in captured.err
