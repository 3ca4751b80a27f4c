"""`adrun profile`: what the model is, what each strategy would cost on this cluster, and (with
trials) what each actually does, ending in one recommended strategy document.

profile run + network facts + fit on this cluster's records → every builder and Auto predicted
→ optional bounded trials of the best-predicted → a `ProfileReport`. Status lines go to stderr
(adrun.ui), so `--json` leaves stdout to the report alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from adrun import ui
from adrun.launch.report import JobReport
from adrun.profile_report import (
    Candidate,
    FitSection,
    ProfileReport,
    cluster_section,
    model_section,
    recommend,
    trials_section,
)
from adrun.records import Records, cluster_key
from adrun.strategies.document import Strategy
from adrun.strategies.facts import ModelProfile, NetworkFacts, NodeBytes, TrialRecord
from adrun.trials import run_trial

TrialCount = int | Literal["all"]


@dataclass(frozen=True)
class ProfileOptions:
    trials: TrialCount | None  # None: predictions only
    trial_steps: int
    runs_dir: Path  # each trial's strategy document goes to runs_dir/<its job id>/


def profile(spec, remote, script: Path, script_args: list[str], job_id: str, options: ProfileOptions,
            records: Records | None) -> tuple[ProfileReport, Strategy]:
    """Profile `script` on `spec` (remote nodes through `remote`, connected and checked) and return
    the report with the recommended plan. `records` (None: --no-record) gives the fit its data and
    keeps every trial."""
    from adrun.launch.network_facts import network_facts
    from adrun.profile_run import profile_model
    from adrun.strategies.auto import rank_builders
    from adrun.strategies.fit import fit

    started = time.monotonic()
    ui.print_status(f"profiling {script} on one process ...")
    model = profile_model(script, script_args, spec.num_workers, job_id)
    ui.print_status("measuring the network ...")
    network = network_facts(spec, remote)
    fitted = fit(records.trials(cluster_key(spec))) if records is not None else None
    ranked = rank_builders(model.graph, spec, model, network, coefficients=fitted.coefficients if fitted else None)
    plans = {plan.builder: plan for plan, _ in ranked}
    candidates = [Candidate(builder=plan.builder, prediction=prediction) for plan, prediction in ranked]
    trials = None
    if options.trials is not None:
        count = len(candidates) if options.trials == "all" else min(options.trials, len(candidates))
        for number, candidate in enumerate(candidates[:count], start=1):
            ui.print_status(f"trial {number}/{count}: {candidate.builder}, {options.trial_steps} steps per worker ...")
            trial_id = f"{job_id}-t{number}-{candidate.builder.lower()}"
            candidate.trial, report = run_trial(spec, remote, script, script_args, plans[candidate.builder],
                                                options.trial_steps, trial_id, options.runs_dir / trial_id)
            if records is not None and report is not None and candidate.trial.succeeded:
                records.add_trial(_trial_record(report, spec, plans[candidate.builder], model, network, script,
                                                script_args))
        trials = trials_section(candidates, options.trial_steps)
    chosen, chosen_by = recommend(candidates)
    report = ProfileReport(
        model=model_section(model, str(script), script_args),
        cluster=cluster_section(spec, network),
        fit=FitSection(records_used=fitted.records_used, records_skipped=fitted.records_skipped,
                       error_before=fitted.error_before, error_after=fitted.error_after)
        if fitted else FitSection(records_used=0),
        candidates=candidates, trials=trials, recommended=chosen.builder, recommended_by=chosen_by,
        recommended_plan=plans[chosen.builder], elapsed_s=time.monotonic() - started,
    )
    return report, plans[chosen.builder]


def _trial_record(report: JobReport, spec, plan: Strategy, model: ModelProfile, network: NetworkFacts,
                  script: Path, script_args: list[str]) -> TrialRecord:
    workers = [t for t in report.tasks if t.role == "worker" and t.steps_per_s]
    return TrialRecord(
        recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cluster_key=cluster_key(spec), workload=" ".join([script.name, *script_args]), spec=spec, strategy=plan,
        profile=model, network=network, steps_per_s=sum(t.steps_per_s for t in workers) / len(workers),
        examples_per_s=report.examples_per_s,
        node_bytes={node: NodeBytes(sent=t.sent_bytes / report.steps * len(workers),
                                    received=t.received_bytes / report.steps * len(workers))
                    for node, t in report.network.items()} if report.steps else {},
    )
