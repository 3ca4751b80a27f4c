"""Trials of `adrun profile --trials`: each candidate strategy runs for a bounded number of steps
on the real cluster, as an ordinary quiet job, and is measured from its JobReport. Each trial is
in the record of jobs like any run (`adrun jobs`, `logs`, `stop` know it by its id; stopping a
trial interrupts the profile, whose process launched it).

A trial that fails is a result (shown with its root cause), not the end of the profile; an
interrupt (Ctrl-C) ends the whole profile, since the user asked to stop.
"""

from __future__ import annotations

import os
from pathlib import Path

from adrun.cli.job_record import recorded_job, warn
from adrun.errors import UserError
from adrun.home import run_dir
from adrun.jobs.registry import new_record
from adrun.launch.env import job_settings
from adrun.launch.job.provision import RemoteNodes
from adrun.launch.job.report import JobReport, job_report
from adrun.launch.job.config import JobConfig
from adrun.profile.report import TrialResult
from adrun.shown_job import run_shown
from adrun.spec import ClusterSpec
from adrun.strategies.document import Strategy, dump_strategy


def run_trial(spec: ClusterSpec, remote: RemoteNodes, script: Path, script_args: list[str], plan: Strategy, steps: int,
              job_id: str, *, command: str, spec_path: Path | None,
              allow_exposed: bool = False) -> tuple[TrialResult, JobReport | None]:
    """Run `plan` for `steps` training steps per worker as job `job_id`, recorded in the record of
    jobs with `command` (the profile's, as typed) and `spec_path` (None: the default local
    cluster); its strategy document is written to the job's private run directory
    (`adrun.home.run_dir`). Returns the trial's measurement and the job's report (None when the job
    could not start, e.g. a fixed port is taken or its id is in use: the trial's root cause then
    says why)."""
    strategy_file = run_dir(job_id) / "strategy.yml"
    dump_strategy(plan, strategy_file)
    settings = job_settings(os.environ, max_steps=steps)  # a bad ADRUN_* setting is the profile's error
    config = JobConfig(job_id=job_id, spec=spec, script=script, script_args=script_args, strategy_file=strategy_file,
                       quiet=True, settings=settings, allow_exposed=allow_exposed)
    record = new_record(job_id, command, spec=spec_path, script=script, nodes=[node.address for node in spec.nodes],
                        log_dir=None)
    try:
        with recorded_job(record) as recorded:
            result = run_shown(config, remote, on_attempt=lambda number: warn(recorded.attempt_started(number)))
            recorded.ended(result.state, result.exit_code)
    except UserError as e:
        return TrialResult(job_id=job_id, succeeded=False, steps=0, root_cause=str(e)), None
    if result.interrupted:
        raise KeyboardInterrupt
    report = job_report(result, job_id, plan.builder, strategy_file)
    return trial_result(report), report


def trial_result(report: JobReport) -> TrialResult:
    """A trial's measurement from its job's report. The synchronous step time is the inverse of
    the workers' mean steps per second: every worker steps once per synchronous step."""
    rates = [t.steps_per_s for t in report.tasks if t.role == "worker" and t.steps_per_s]
    measured = bool(rates) and report.succeeded
    root_cause = report.root_cause
    if report.succeeded and not rates:
        root_cause = ("the workers ended before a second training step, so no rate could be measured: let the "
                      "script run longer (its own steps or epochs argument)")
    return TrialResult(
        job_id=report.job_id, succeeded=measured, steps=report.steps, elapsed_s=report.elapsed_s,
        step_s=len(rates) / sum(rates) if measured else None,
        examples_per_s=report.examples_per_s if measured else None,
        root_cause=root_cause, root_cause_stderr=report.root_cause_stderr,
    )

