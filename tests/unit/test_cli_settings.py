"""`adrun run`'s settings reach the tasks through the env contract alone: the command line is
turned into the job's typed Settings, never into the launcher's own environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import adrun.shown_job
from adrun.cli import main
from adrun.env_vars import Settings
from adrun.errors import UserError
from adrun.launch.job.plan import plan_job

pytestmark = pytest.mark.timeout(240)  # one capture of the script: TensorFlow starts once

TINY = Path(__file__).resolve().parents[1] / "scripts" / "tiny_model.py"
STOP = "stopped by the test before any task started"


def test_shard_data_and_max_steps_become_the_jobs_settings_and_leave_the_environment_alone(monkeypatch, spec_file):
    monkeypatch.setenv("ADRUN_OP_TIMEOUT", "30")  # a setting of the launcher's environment: passes through
    before = dict(os.environ)
    seen = {}

    def run_job(config, remote, listener=None):
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
