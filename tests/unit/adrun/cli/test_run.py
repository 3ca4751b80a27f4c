"""`adrun run`'s settings reach the tasks through the env contract alone: the command line is
turned into the job's typed Settings, never into the launcher's own environment."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

import adrun.shown_job
from adrun.cli import main
from adrun.env_vars import Settings
from adrun.errors import UserError
from adrun.launch.job.plan import plan_job
from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.timeout(240)  # one capture of the script: TensorFlow starts once

TINY = SCRIPTS / "tiny_model.py"
STOP = "stopped by the test before any task started"


def test_shard_data_and_max_steps_become_the_jobs_settings_and_leave_the_environment_alone(monkeypatch, spec_file):
    monkeypatch.setenv("ADRUN_OP_TIMEOUT", "30")  # a setting of the launcher's environment: passes through
    before = dict(os.environ)
    seen = {}

    def run_job(config, remote, listener=None, interrupt=None):
        """Where the job would start: what it was given, and what its tasks would be told."""
        seen["environ"] = dict(os.environ)
        seen["settings"] = config.settings
        seen["envs"] = [launch.env for launch in plan_job(
            config.spec, config.script, config.script_args, job_id=config.job_id,
            strategy_file=config.strategy_file, settings=config.settings)]
        raise UserError(STOP)

    monkeypatch.setattr(adrun.shown_job, "run_job", run_job)
    result = CliRunner().invoke(main, ["--spec", str(spec_file()), "--no-record", "--shard-data", "--max-steps", "3",
                                       str(TINY), "--steps", "1"])

    assert result.exit_code == 2 and f"adrun: error: {STOP}" in result.output, result.output
    assert dict(os.environ) == before and seen["environ"] == before
    assert seen["settings"] == Settings(shard_data=True, max_steps=3, op_timeout_s=30.0)
    assert len(seen["envs"]) == 3  # 2 workers and a PS, every one told the same settings
    for env in seen["envs"]:
        assert (env["ADRUN_SHARD_DATA"], env["ADRUN_MAX_STEPS"], env["ADRUN_OP_TIMEOUT"]) == ("1", "3", "30")


def test_an_attempt_tells_every_task_the_jobs_settings(monkeypatch, spec_file, tmp_path):
    """The hand-off the CLI test above replaces: JobConfig.settings reaches every launch that
    run_attempt gives the supervisor, with the attempt's number."""
    from adrun.launch.job import attempt
    from adrun.launch.job.backends import JobNodes
    from adrun.launch.job.config import JobConfig
    from adrun.launch.job.metrics import Throughput
    from adrun.launch.job.provision import RemoteNodes
    from adrun.launch.job.results import JobResult
    from adrun.spec import load_spec

    launched = []

    def supervise(launches, config, listener, **kwargs):
        launched.extend(launches)
        return JobResult(0, None, False, Throughput(), [], 0.0)

    monkeypatch.setattr(attempt, "supervise", supervise)
    spec = load_spec(spec_file(workers=2, ps=1))
    config = JobConfig(job_id="settings-test", spec=spec, script=TINY, script_args=[],
                       strategy_file=tmp_path / "strategy.yml", settings=Settings(shard_data=True, max_steps=4),
                       allow_exposed=True)  # no task starts: no rule to install, nothing to warn of
    with RemoteNodes(spec) as remote:
        attempt.run_attempt(config, JobNodes(spec, remote), listener=None, attempt=2)
    assert len(launched) == 3
    for launch in launched:
        assert (launch.env["ADRUN_SHARD_DATA"], launch.env["ADRUN_MAX_STEPS"], launch.env["ADRUN_RESTART_COUNT"]) \
            == ("1", "4", "2"), launch.task


def test_a_profile_trial_is_bounded_by_its_own_settings(monkeypatch, spec_file, tmp_path):
    """`adrun profile --trials`: each trial's job carries max_steps = the trial length, through its
    JobConfig and not the launcher's environment."""
    from adrun.profile import trials
    from adrun.launch.job.provision import RemoteNodes
    from adrun.spec import load_spec
    from adrun.strategies.document import Strategy

    seen = {}

    def run_shown(config, remote, on_attempt=None):
        seen["settings"] = config.settings
        raise UserError(STOP)

    monkeypatch.setattr(trials, "run_shown", run_shown)
    before = dict(os.environ)
    spec = load_spec(spec_file(workers=2, ps=1))
    plan = Strategy.model_validate({"version": 1, "builder": "PS", "fingerprint": "f", "num_workers": 2, "num_ps": 1,
                                    "variables": []})
    with RemoteNodes(spec) as remote:
        result, report = trials.run_trial(spec, remote, TINY, [], plan, 7, "trial-test", command="adrun profile",
                                          spec_path=None)
    assert seen["settings"].max_steps == 7 and not result.succeeded and report is None
    assert dict(os.environ) == before
