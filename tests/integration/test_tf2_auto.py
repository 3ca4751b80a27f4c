"""Auto and `adrun profile` on TF2 scripts: with no --strategy a TF2 script is profiled once and
planned by Auto among what TF2 mode runs (the why line printed, the plan remembered for the next
start), trains exactly (the averaging oracle), and `adrun profile` times its steps and tries its
candidates as jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from adrun.profile.report import ProfileReport
from adrun.strategies import BUILDERS
from adrun.strategies.document import load_strategy, tf2_refusals
from tests.support.adrun_cli import run_adrun, write_spec
from tests.support.tf2_oracle import SCRIPT, TOLERANCE, averaging

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def runnable_in_tf2(plan_path: Path) -> bool:
    plan = load_strategy(plan_path)
    return plan.kind == "tf2" and not tf2_refusals(plan.variables, plan.replica_devices)


def test_a_default_start_of_a_tf2_script_is_planned_by_auto_and_remembered(tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path / "cluster.yml", workers=2, ps=1))
    args = (SCRIPT, "--kind", "embed-adam", "--out", str(tmp_path / "out"), "--epochs", "5")
    first = run_adrun("--spec", spec, "--dry-run", *args)
    assert first.returncode == 0, first.output
    assert "profiling" in first.stderr and "the plan made earlier" not in first.stderr
    assert "strategy Auto (TF2 script): 2 workers, 1 PS" in flat(first.stderr)
    why = next(line for line in first.stderr.splitlines() if line.startswith("why Auto: "))
    assert why.startswith("why Auto: predicted step ") and "; next: " in why and why.count(" ms") == 3, why
    assert "PS" not in why.split("; next: ")[1]  # the builders ranked beside it are those TF2 runs
    plan_file = Path(first.stderr.split("strategy written to ")[1].split(";")[0])
    assert runnable_in_tf2(plan_file)

    second = run_adrun("--spec", spec, "--dry-run", *args)
    assert second.returncode == 0, second.output
    assert "profiling" not in second.stderr
    assert "Auto: the plan made earlier for this graph on this cluster" in flat(second.stderr)
    assert why in second.stderr.splitlines()
    assert leftover_processes(first.job_id) == [] and leftover_processes(second.job_id) == []


def test_a_tf2_script_with_no_strategy_passes_the_averaging_oracle(tmp_path: Path) -> None:
    off, between = averaging(tmp_path, "embed-adam", strategy=())
    assert off <= TOLERANCE
    assert between == 0.0


def test_profile_of_a_tf2_script_times_its_step_and_names_what_tf2_cannot_run(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "cluster.yml", workers=2, ps=1)
    result = run_adrun("profile", "--spec", str(spec), "--no-record", "--json", SCRIPT, "--kind", "embed-sgd",
                       "--out", str(tmp_path / "out"), "--epochs", "5")
    assert result.returncode == 0, result.output
    report = ProfileReport.model_validate_json(result.stdout)
    assert report.model.kind == "tf2" and report.model.compute_s > 0 and report.model.steps_measured > 0
    assert report.model.batch_size == 8
    embedding = next(v for v in report.model.variables if v.grad == "sparse")
    assert 0 < embedding.rows_touched_mean <= embedding.rows_touched_max <= 8 * 5  # a batch's ids
    ranked = {c.builder for c in report.candidates}
    # every builder is either ranked or named as unavailable with the reason its TF2 plan was refused
    assert "Auto" in ranked and "AllReduce" in ranked and ranked | set(report.unavailable) == {*BUILDERS, "Auto"}
    assert not ranked & set(report.unavailable) and all(report.unavailable.values())
    assert all(c.prediction.step_s > 0 for c in report.candidates)
    assert report.recommended_plan.kind == "tf2"


@pytest.mark.full
def test_profile_trials_of_a_tf2_script_run_two_candidates_as_jobs(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "cluster.yml", workers=2, ps=0)
    job_id = "profile-tf2-trials"
    result = run_adrun("profile", "--job-id", job_id, "--spec", str(spec), "--records", str(tmp_path / "r.sqlite"),
                       "--json", "--trials", "2", "--trial-steps", "10", SCRIPT, "--kind", "fit-sequential",
                       "--out", str(tmp_path / "out"), "--epochs", "20", job_id=job_id)
    assert result.returncode == 0, result.output
    report = ProfileReport.model_validate_json(result.stdout)
    tried = [c for c in report.candidates if c.trial is not None]
    assert len(tried) == 2 and tried == [c for c in report.candidates if c.same_plan_as is None][:2]
    for candidate in tried:
        assert candidate.trial.succeeded, candidate.trial
        assert candidate.trial.steps == 2 * 10 and candidate.trial.step_s > 0
        assert leftover_processes(candidate.trial.job_id) == []
    assert report.recommended_by == "trials"
    jobs = {job["id"]: job for job in json.loads(run_adrun("jobs", "--all", "--json").stdout)}
    assert all(jobs[c.trial.job_id]["state"] == "succeeded" for c in tried)
