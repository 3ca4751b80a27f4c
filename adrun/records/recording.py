"""What a finished run leaves in the records database: its JobReport as a TrialRecord.

The fit (strategies/fit.py) learns per-worker synchronous step rates and bytes per node per step,
while the JobReport holds the cluster's summed rate and each node's bytes over the whole run;
`trial_from_report` converts one into the other.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timezone
from pathlib import Path

from adrun.launch.job.report import JobReport
from adrun.records.store import Records, cluster_key
from adrun.spec import ClusterSpec
from adrun.strategies.document import Strategy
from adrun.strategies.facts import ModelProfile, NetworkFacts, NodeBytes, TrialRecord


def workload_name(script: Path, script_args: list[str]) -> str:
    """The script's file name and arguments, as a shell would show them: one model's runs share it."""
    return shlex.join([script.name, *script_args])


def trial_from_report(report: JobReport, spec: ClusterSpec, plan: Strategy, workload: str,
                      profile: ModelProfile | None = None, network: NetworkFacts | None = None) -> TrialRecord | None:
    """The record of a finished run; None when there is nothing to learn from it (it failed or was
    interrupted, or no worker ran long enough to measure a rate).

    - `steps_per_s`: the mean of the workers' own rates, i.e. the cluster's summed rate
      (`JobReport.steps_per_s`) divided by the number of workers that measured one. Under a
      synchronous plan every worker steps at the cluster's synchronous step rate, so this is it.
    - `examples_per_s`: the cluster's (summed over the workers), as the cost model predicts it.
    - `node_bytes`: each node's bytes over the run divided by the steps of one worker (the mean of
      the workers' step counts). Only for jobs on several nodes: a one-node job talks over loopback,
      which is not counted, so its counters hold only other programs' traffic. The counters include
      the start-up (initial values, the first broadcast), which a longer run spreads thinner.
    """
    worker_rates = [t.steps_per_s for t in report.tasks if t.role == "worker" and t.steps_per_s is not None]
    steps_per_s = sum(worker_rates) / len(worker_rates) if worker_rates else 0.0
    if not report.succeeded or steps_per_s <= 0:
        return None
    node_bytes = {}
    worker_steps = [t.steps for t in report.tasks if t.role == "worker" and t.steps]
    if len(report.network) > 1 and worker_steps:
        steps = sum(worker_steps) / len(worker_steps)
        node_bytes = {node: NodeBytes(sent=traffic.sent_bytes / steps, received=traffic.received_bytes / steps)
                      for node, traffic in report.network.items()}
    return TrialRecord(
        recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cluster_key=cluster_key(spec), workload=workload, spec=spec, strategy=plan,
        profile=profile, network=network,
        steps_per_s=steps_per_s,
        examples_per_s=report.examples_per_s, node_bytes=node_bytes,
    )


def record_run(records: Records, report: JobReport, spec: ClusterSpec, plan: Strategy, workload: str,
               batch_size: int | None) -> int | None:
    """Add the finished run to `records`, with the stored profile of its graph at its batch size and
    the stored network facts of its cluster; the trial number, or None when it was not recorded
    (see `trial_from_report`). Raises UserError when the database cannot be written.

    The batch size is what the workers measured (examples per step, e.g. a fed placeholder's rows),
    as the profiling run does, else `batch_size` (the capture's): a script fed through placeholders
    has no batch size in its graph."""
    measured = next((t.examples_per_step for t in report.tasks if t.role == "worker" and t.examples_per_step), None)
    profile = records.profile_for(plan.fingerprint, measured or batch_size)
    trial = trial_from_report(report, spec, plan, workload, profile, records.network_for(cluster_key(spec)))
    return None if trial is None else records.add_trial(trial)
