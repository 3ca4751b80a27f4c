"""`adrun profile` end to end: the report of a bundled example as JSON (every built-in builder and
Auto predicted, the model table), `-o` writing a document a run accepts, bounded trials measured
and recorded, a failed trial reported without ending the profile, Ctrl-C during a trial, and bad input refused
with one message and nothing left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from adrun.profile.report import ProfileReport
from adrun.records.store import cluster_key, open_records
from adrun.spec import load_spec
from adrun.strategies import BUILDERS
from tests.support.adrun_cli import AdrunResult, run_adrun
from tests.support.oracle import train_and_compare
from tests.support.paths import REPO, SCRIPTS, TINY

pytestmark = pytest.mark.integration

EMBEDDING = str(REPO / "examples" / "embedding.py")
EVERY_CANDIDATE = {*BUILDERS, "Auto"}


def profiled(*args: str, job_id: str, timeout: float = 600) -> tuple[AdrunResult, ProfileReport]:
    result = run_adrun("profile", "--job-id", job_id, "--json", *args, job_id=job_id, timeout=timeout)
    assert result.returncode == 0, result.output
    assert "adrun/cli/" not in result.output  # no traceback of adrun's (a failed trial quotes the script's)
    return result, ProfileReport.model_validate_json(result.stdout)  # stdout holds the report and nothing else


def no_leftovers(report: ProfileReport, job_id: str) -> None:
    for jid in [job_id, *(c.trial.job_id for c in report.candidates if c.trial)]:
        assert leftover_processes(jid) == [], jid


def test_embedding_report_and_its_plan_runs(tmp_path: Path, spec_file) -> None:
    spec = spec_file(workers=2, ps=1)
    plan = tmp_path / "plan.yml"
    result, report = profiled("--spec", str(spec), "--records", str(tmp_path / "r.sqlite"), "-o", str(plan),
                              EMBEDDING, "--steps", "40", job_id="profile-embedding")
    no_leftovers(report, "profile-embedding")
    assert {c.builder for c in report.candidates} == EVERY_CANDIDATE
    steps = [c.prediction.step_s for c in report.candidates]
    assert all(s > 0 for s in steps) and steps == sorted(steps)
    assert all(c.prediction.examples_per_s > 0 and c.trial is None for c in report.candidates)
    assert report.trials is None and report.fit.records_used == 0
    by_name = {v.name: v for v in report.model.variables}
    assert set(by_name) == {"embedding", "head"}
    embedding = by_name["embedding"]
    assert embedding.grad == "sparse" and embedding.shape == [1000, 16]
    assert 0 < embedding.rows_touched_mean <= embedding.rows_touched_max <= 64 * 10
    assert by_name["head"].grad == "dense" and by_name["head"].rows_touched_mean is None
    assert report.model.batch_size == 64 and report.model.compute_s > 0
    assert (report.cluster.num_workers, report.cluster.num_ps) == (2, 1)
    assert report.recommended == report.candidates[0].builder and report.recommended_by == "prediction"
    assert "adrun: " in result.stderr  # status lines went to stderr
    print(f"adrun profile examples/embedding.py: {report.elapsed_s:.1f} s, load {os.getloadavg()}")

    run = run_adrun("--spec", str(spec), "--strategy", str(plan), "--quiet", EMBEDDING, "--steps", "3")
    assert run.returncode == 0, run.output
    assert f"strategy {report.recommended}" in run.stderr
    assert leftover_processes(run.job_id) == []


def test_more_hosts_are_predicted_and_plotted(tmp_path: Path) -> None:
    """One machine whose spec gives the path between hosts: every builder and Auto at 1, 2 and 8
    hosts in the JSON, the PNG written, nothing left running."""
    spec = tmp_path / "one.yml"
    spec.write_text("version: 1\nnodes:\n  - {address: localhost, workers: 2, ps: 1}\n"
                    "network: {bandwidth_mbit: 100, latency_ms: 0.5, local: {bandwidth_mbit: 20000, latency_ms: 0.02}}\n")
    plot = tmp_path / "scaling.png"
    _, report = profiled("--spec", str(spec), "--no-record", "--hosts", "8,1,2", "--plot", str(plot),
                         EMBEDDING, "--steps", "40", job_id="profile-hosts")
    no_leftovers(report, "profile-hosts")
    scaling = report.scaling
    assert scaling is not None and scaling.host_counts == [1, 2, 8]
    assert (scaling.link_mbit_s, scaling.link_latency_ms) == (100, 0.5) and scaling.link_source.startswith("spec")
    assert {c.builder for c in scaling.curves} == EVERY_CANDIDATE and scaling.curves[-1].builder == "Auto"
    for curve in scaling.curves:
        assert [p.hosts for p in curve.points] == [1, 2, 8]
        # the cluster's examples/s is its workers' batches over the step: 2 workers per host
        assert all(p.examples_per_s == pytest.approx(64 * 2 * p.hosts / p.step_s) for p in curve.points)
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.full
def test_recommended_plan_is_data_parallel_sgd(tmp_path: Path, spec_file) -> None:
    """The `-o` document of the sparse oracle model, run through the averaging oracle."""
    spec = spec_file(workers=2, ps=1)
    plan = tmp_path / "plan.yml"
    # the profiling run needs more steps than the oracle's 3; the graph, and so the plan, is the same
    profiled("--spec", str(spec), "--no-record", "-o", str(plan), str(SCRIPTS / "oracle_model.py"),
             "--model", "sparse", "--data", "per-worker", "--steps", "30", "--out", str(tmp_path / "profile-out"),
             job_id="profile-oracle")
    train_and_compare(tmp_path, spec_file, str(plan), "sparse", "per-worker")


@pytest.mark.full
def test_two_trials_are_measured_recorded_and_ranked(tmp_path: Path, spec_file) -> None:
    spec = spec_file(workers=2, ps=1)
    records = tmp_path / "r.sqlite"
    _, report = profiled("--spec", str(spec), "--records", str(records), "--trials", "2", "--trial-steps", "20",
                         EMBEDDING, job_id="profile-trials")
    no_leftovers(report, "profile-trials")
    distinct = [c for c in report.candidates if c.same_plan_as is None]
    tried = [c for c in report.candidates if c.trial is not None]
    assert tried == distinct[:2]  # the two best predicted plans (a builder repeating a plan is not run again)
    for candidate in tried:
        assert candidate.trial.succeeded, candidate.trial
        assert candidate.trial.step_s > 0 and candidate.trial.examples_per_s > 0
        assert candidate.trial.steps == 2 * 20  # ADRUN_MAX_STEPS ended each worker after its 20th step
    assert (report.trials.tried, report.trials.succeeded, report.trials.steps) == (2, 2, 20)
    tied = tried[0].prediction.step_s == tried[1].prediction.step_s
    assert report.trials.kendall_tau in ((None,) if tied else (-1.0, 1.0))
    assert report.trials.mean_relative_error == pytest.approx(
        sum(abs(c.prediction.step_s - c.trial.step_s) / c.trial.step_s for c in tried) / 2)
    assert report.recommended_by == "trials"
    assert report.recommended == min(tried, key=lambda c: c.trial.step_s).builder
    with open_records(records) as db:
        kept = db.trials(cluster_key(load_spec(spec)))
    assert [r.strategy.builder for r in kept] == [c.builder for c in tried]
    assert all(r.profile is not None and r.network is not None for r in kept)

    # the next profile of this cluster fits the cost model on those two trials
    _, again = profiled("--spec", str(spec), "--records", str(records), EMBEDDING, job_id="profile-after-trials")
    assert again.fit.records_used == 2 and again.fit.records_skipped == 0
    assert again.fit.error_after <= again.fit.error_before


def test_a_trial_is_a_job_in_adrun_jobs_with_its_state(tmp_path: Path, spec_file) -> None:
    spec = spec_file(workers=2, ps=1)
    job_id = "profile-trial-job"
    _, report = profiled("--spec", str(spec), "--no-record", "--trials", "1", "--trial-steps", "3",
                         TINY, "--steps", "20", job_id=job_id)
    no_leftovers(report, job_id)
    tried = [c.trial for c in report.candidates if c.trial is not None]
    assert len(tried) == 1 and tried[0].succeeded and tried[0].job_id.startswith(f"{job_id}-t1-")
    listed = run_adrun("jobs", "--all", "--json")
    assert listed.returncode == 0, listed.output
    jobs = {job["id"]: job for job in json.loads(listed.stdout)}
    trial = jobs[tried[0].job_id]
    assert (trial["state"], trial["exit_code"], trial["script"]) == ("succeeded", 0, TINY)
    assert trial["spec"] == str(spec.resolve()) and trial["ended"] is not None
    assert trial["command"].startswith("adrun profile --job-id profile-trial-job")
    assert tried[0].job_id not in {job["id"] for job in json.loads(run_adrun("jobs", "--json").stdout)}  # ended


def test_failed_trial_is_reported_not_fatal(tmp_path: Path, spec_file) -> None:
    """Worker 1 raises at its first step in every run (never in the one-process profiling run). The
    cluster has no PS, so the PS builders are named as impossible rather than predicted."""
    spec = spec_file(workers=2, ps=0)
    records = tmp_path / "r.sqlite"
    _, report = profiled("--spec", str(spec), "--records", str(records), "--trials", "1", TINY, "--steps", "50",
                         "--fail-on", "1", "--fail-at", "1", job_id="profile-failing")
    no_leftovers(report, "profile-failing")
    # (Parallax plans this dense model: it puts only sparse variables on PSs)
    assert set(report.unavailable) == {"PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS"}
    assert all("no PS process" in why for why in report.unavailable.values())
    assert {c.builder for c in report.candidates} == EVERY_CANDIDATE - set(report.unavailable)
    [tried] = [c for c in report.candidates if c.trial is not None]
    assert not tried.trial.succeeded and tried.trial.step_s is None
    assert "w1 (worker 1 on localhost) exited with code 1" in tried.trial.root_cause, tried.trial
    listed = json.loads(run_adrun("jobs", "--all", "--json").stdout)
    assert [(j["state"], j["exit_code"]) for j in listed if j["id"] == tried.trial.job_id] == [("failed", 1)]
    assert any("RuntimeError" in line or "Error" in line for line in tried.trial.root_cause_stderr)
    assert (report.trials.tried, report.trials.succeeded, report.trials.kendall_tau) == (1, 0, None)
    assert report.recommended == report.candidates[0].builder and report.recommended_by == "prediction"
    with open_records(records) as db:
        assert db.trials(cluster_key(load_spec(spec))) == []  # nothing measured, nothing to learn from


# --- bad input ------------------------------------------------------------------------------------


def refused(*args: str, job_id: str) -> str:
    """The error message (from its `adrun: error:` line to the end of stderr) of a refused profile."""
    result = run_adrun("profile", "--job-id", job_id, *args, job_id=job_id, timeout=300)
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    assert leftover_processes(job_id) == []
    [start] = [i for i, line in enumerate(result.stderr.splitlines()) if line.startswith("adrun: error: ")]
    return "\n".join(result.stderr.splitlines()[start:])


def test_script_without_training_op() -> None:
    line = refused("--no-record", TINY, "--no-train", job_id="profile-no-train")
    assert line.startswith(f"adrun: error: {TINY}: its graph has no training op:"), line


def test_eager_script() -> None:
    script = str(SCRIPTS / "eager_script.py")
    line = refused("--no-record", "--json", script, job_id="profile-eager")
    assert line.startswith(f"adrun: error: {script}: ran to its end without an optimizer apply: "), line


def test_unreachable_node(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yml"
    spec.write_text("version: 1\nnodes:\n  - address: no-such-host.invalid\n    workers: 2\n    ps: 1\n")
    message = refused("--spec", str(spec), "--no-record", TINY, job_id="profile-unreachable")
    assert message.startswith("adrun: error: cannot reach every node:\n  cannot resolve no-such-host.invalid"), message


def test_corrupt_records_database(tmp_path: Path) -> None:
    records = tmp_path / "records.sqlite"
    records.write_bytes(b"this is no database" * 100)
    line = refused("--records", str(records), TINY, job_id="profile-corrupt-records")
    assert line.startswith(f"adrun: error: records database {records} cannot be used:"), line
    assert "--no-record" in line


def test_output_in_a_missing_directory_is_refused_before_the_profile(tmp_path: Path) -> None:
    plan = tmp_path / "no-such-dir" / "plan.yml"
    line = refused("--no-record", "-o", str(plan), TINY, job_id="profile-bad-output")
    assert line == f"adrun: error: -o {plan}: directory {plan.parent} does not exist"


@pytest.mark.full
def test_ctrl_c_during_a_trial_ends_the_profile_with_130(tmp_path: Path) -> None:
    job_id = "profile-interrupted"
    err = tmp_path / "stderr"
    with err.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "adrun", "profile", "--job-id", job_id, "--no-record", "--trials", "2",
             "--trial-steps", "100000", TINY, "--steps", "100000", "--step-sleep", "0.05"],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=sink, text=True,
            start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while f"job {job_id}-t1-" not in err.read_text():  # the first trial's tasks started
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            stdout, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = err.read_text()
    assert proc.returncode == 130, text
    assert stdout == "" and text.splitlines()[-1] == "adrun: interrupted"
    assert "trial 2/" not in text and "Traceback" not in text
    trial_ids = {line.split()[1].rstrip(":") for line in text.splitlines() if line.startswith(f"adrun: job {job_id}")}
    assert len(trial_ids) == 1
    for jid in [job_id, *trial_ids]:
        assert leftover_processes(jid) == [], jid
