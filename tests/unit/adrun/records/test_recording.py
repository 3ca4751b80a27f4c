"""A finished run's JobReport as a TrialRecord (adrun/records/recording.py): the conversions the fit relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.launch.job.report import JobReport, NodeTraffic, TaskReport
from adrun.records.store import cluster_key, open_records
from adrun.records.recording import record_run, trial_from_report, workload_name
from adrun.spec import ClusterSpec, Node
from adrun.strategies import build_strategy
from adrun.strategies.facts import NodeBytes
from tests.support.record_facts import item, network, profile

TWO_HOSTS = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=1, ps=1),
                                          Node(address="10.0.0.2", workers=1, ps=0)])


def worker(index: int, host: str, steps: int | None, rate: float | None) -> TaskReport:
    return TaskReport(task=f"w{index}", role="worker", index=index, host=host, exit_code=0, signal=None,
                      stopped_by_adrun=False, steps=steps, steps_per_s=rate,
                      examples_per_s=rate * 32 if rate else None, examples_per_step=32)


def report(tasks: list[TaskReport], network: dict[str, NodeTraffic] | None = None, exit_code: int = 0) -> JobReport:
    rates = [t.steps_per_s for t in tasks if t.steps_per_s is not None]
    return JobReport(
        job_id="j", builder="PS", strategy_file="/tmp/s.yml", exit_code=exit_code, succeeded=exit_code == 0,
        interrupted=False, root_cause=None, elapsed_s=10.0, steps=sum(t.steps or 0 for t in tasks),
        steps_per_s=sum(rates) if rates else None, examples_per_s=sum(rates) * 32 if rates else None,
        tasks=[*tasks, TaskReport(task="ps0", role="ps", index=0, host="10.0.0.1", exit_code=None,
                                  signal="SIGTERM", stopped_by_adrun=True)],
        network=network or {},
    )


def test_rate_is_per_worker_and_bytes_are_per_step_of_one_worker() -> None:
    plan = build_strategy("PS", item(), TWO_HOSTS)
    done = report([worker(0, "10.0.0.1", 100, 4.0), worker(1, "10.0.0.2", 300, 6.0)],
                  {"10.0.0.1": NodeTraffic(sent_bytes=4_000_000, received_bytes=1_000_000),
                   "10.0.0.2": NodeTraffic(sent_bytes=1_000_000, received_bytes=4_000_000)})
    trial = trial_from_report(done, TWO_HOSTS, plan, "train.py --x 1")
    assert trial.steps_per_s == 5.0  # (4 + 6) / 2 workers: the summed 10 steps/s is two workers' steps
    assert trial.examples_per_s == 320.0  # the cluster's
    assert trial.node_bytes == {"10.0.0.1": NodeBytes(sent=20_000.0, received=5_000.0),  # over 200 steps
                                "10.0.0.2": NodeBytes(sent=5_000.0, received=20_000.0)}
    assert trial.cluster_key == cluster_key(TWO_HOSTS) and trial.strategy == plan and trial.spec == TWO_HOSTS
    assert trial.workload == "train.py --x 1" and trial.profile is None and trial.network is None


def test_one_node_jobs_record_no_bytes() -> None:
    """Their traffic is loopback, which the counters leave out: what they hold is other programs'."""
    local = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=1)])
    done = report([worker(0, "localhost", 10, 2.0), worker(1, "localhost", 10, 2.0)],
                  {"localhost": NodeTraffic(sent_bytes=123, received_bytes=456)})
    assert trial_from_report(done, local, build_strategy("PS", item(), local), "t.py").node_bytes == {}


@pytest.mark.parametrize("case", ["failed", "no rate", "zero rate"])
def test_runs_without_a_measured_rate_or_success_are_not_recorded(case: str) -> None:
    plan = build_strategy("PS", item(), TWO_HOSTS)
    tasks = {"failed": [worker(0, "10.0.0.1", 10, 3.0), worker(1, "10.0.0.2", 10, 3.0)],
             "no rate": [worker(0, "10.0.0.1", 1, None), worker(1, "10.0.0.2", None, None)],
             "zero rate": [worker(0, "10.0.0.1", 1, 0.0), worker(1, "10.0.0.2", 1, 0.0)]}[case]
    done = report(tasks, exit_code=1 if case == "failed" else 0)
    assert trial_from_report(done, TWO_HOSTS, plan, "t.py") is None


def test_record_run_attaches_the_stored_profile_and_network(tmp_path: Path) -> None:
    """The profile is looked up at the batch size the workers measured (32 examples per step),
    also when the capture could not read one (placeholders: None)."""
    plan = build_strategy("AllReduce", item(), TWO_HOSTS)
    done = report([worker(0, "10.0.0.1", 50, 8.0), worker(1, "10.0.0.2", 50, 8.0)])
    unmeasured = report([w.model_copy(update={"examples_per_step": None})
                         for w in (worker(0, "10.0.0.1", 50, 8.0), worker(1, "10.0.0.2", 50, 8.0))])
    with open_records(tmp_path / "r.sqlite") as records:
        assert record_run(records, done, TWO_HOSTS, plan, "t.py", None) == 1
        records.save_profile(profile(item(32)))
        records.save_network(cluster_key(TWO_HOSTS), network())
        assert record_run(records, done, TWO_HOSTS, plan, "t.py", None) == 2
        assert record_run(records, unmeasured, TWO_HOSTS, plan, "t.py", 64) == 3  # no profile at 64
        assert record_run(records, unmeasured, TWO_HOSTS, plan, "t.py", 32) == 4
        trials = records.trials(cluster_key(TWO_HOSTS))
        assert [(t.profile, t.network) for t in trials] == [
            (None, None), (profile(item(32)), network()), (None, network()), (profile(item(32)), network())]
        assert record_run(records, report([], exit_code=1), TWO_HOSTS, plan, "t.py", 32) is None
        assert len(records.trials(cluster_key(TWO_HOSTS))) == 4


def test_workload_name_quotes_arguments_as_a_shell_would() -> None:
    assert workload_name(Path("/a/b/train.py"), ["--name", "two words"]) == "train.py --name 'two words'"


def test_a_record_that_cannot_be_written_is_one_warning_not_a_failure(tmp_path: Path, capsys) -> None:
    """The job has finished: the CLI says the run was not recorded and carries on to its exit code."""
    from adrun.cli.run import _record

    path = tmp_path / "r.sqlite"
    plan = build_strategy("PS", item(), TWO_HOSTS)
    done = report([worker(0, "10.0.0.1", 50, 8.0), worker(1, "10.0.0.2", 50, 8.0)])
    with open_records(path) as records:
        _record(records, done, TWO_HOSTS, plan, "t.py", 32)
        assert f"recorded as trial 1 in {path}" in " ".join(capsys.readouterr().err.split())
        path.write_bytes(b"overwritten by something else " * 200)
        _record(records, done, TWO_HOSTS, plan, "t.py", 32)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert " ".join(err.split()).startswith(f"adrun: warning: the run was not recorded: records database {path}")
