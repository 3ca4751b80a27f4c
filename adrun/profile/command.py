"""`adrun profile`: what the model is, what each strategy would cost on this cluster, and (with
trials) what each actually does, ending in one recommended strategy document.

Auto's facts gathered (adrun/gathering.py: profile run, network facts, fit on this cluster's
records) → every builder and Auto predicted (`Auto.rank`) → optional bounded trials of the
best-predicted → with --hosts, every builder and Auto predicted on more hosts of the cluster's
kind (adrun/profile/scaling.py) → a `ProfileReport`. Status lines go to stderr
(adrun.ui), so `--json` leaves stdout to the report alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from adrun import ui
from adrun.errors import UserError
from adrun.gathering import FactSources, gather_facts
from adrun.graph_item import GraphItem
from adrun.launch.job.provision import RemoteNodes
from adrun.profile.report import (
    Candidate,
    FitSection,
    ProfileReport,
    cluster_section,
    model_section,
    recommend,
    same_plan,
    trials_section,
)
from adrun.profile.scaling import scaling_section
from adrun.profile.trials import run_trial
from adrun.records.recording import trial_from_report, workload_name
from adrun.records.store import Records
from adrun.spec import ClusterSpec
from adrun.strategies import BUILDERS, build_strategy
from adrun.strategies.auto import Auto, AutoOptions
from adrun.strategies.document import Strategy
from adrun.strategies.facts import Prediction, TrialRecord
from adrun.strategies.planning_facts import PlanningFacts

TrialCount = int | Literal["all"]


@dataclass(frozen=True)
class ProfileOptions:
    trials: TrialCount | None  # None: predictions only
    trial_steps: int
    auto: AutoOptions  # what Auto may consider (lossy compression, staleness)
    measure_network: bool = False  # measure even when the records hold this cluster's network facts
    allow_exposed: bool = False  # trials install no packet-filter rule (--allow-exposed)
    hosts: tuple[int, ...] = ()  # --hosts: also predict on this many hosts of the cluster's kind
    command: str = "adrun profile"  # as typed: each trial's record in the record of jobs shows it
    spec_path: Path | None = None  # the cluster spec's file (None: the default local cluster), for the same


def profile(spec: ClusterSpec, remote: RemoteNodes, script: Path, script_args: list[str], job_id: str, options: ProfileOptions,
            records: Records | None) -> tuple[ProfileReport, Strategy]:
    """Profile `script` on `spec` (remote nodes through `remote`, connected and checked) and return
    the report with the recommended plan. `records` (None: --no-record) gives the fit its data and
    keeps every trial that measured a rate."""
    started = time.monotonic()
    auto = Auto(options.auto)
    facts = gather_facts(auto.needs, FactSources(script, script_args, spec, job_id, remote, records,
                                                 measure_network=options.measure_network))
    assert facts.profile is not None and facts.network is not None and facts.fit is not None
    if facts.profile.untimed:  # a run plans from the facts alone; profiling is for measuring
        raise UserError(f"{script}: no step was timed, so there is nothing to profile; let it run longer")
    ranked = auto.rank(facts)
    plans = {plan.builder: plan for plan, _ in ranked}
    candidates = _candidates(ranked)
    trials = None
    if options.trials is not None:
        _run_trials(candidates, options.trials, plans, facts, remote, script, script_args, job_id, options, records)
        trials = trials_section(candidates, options.trial_steps)
    scaling = scaling_section(facts, auto, list(options.hosts)) if options.hosts else None
    chosen, chosen_by = recommend(candidates)
    fitted = facts.fit
    report = ProfileReport(
        model=model_section(facts.profile, str(script), script_args),
        cluster=cluster_section(spec, facts.network),
        fit=FitSection(records_used=fitted.records_used, records_skipped=fitted.records_skipped,
                       error_before=fitted.error_before, error_after=fitted.error_after),
        candidates=candidates,
        unavailable={name: why for name in BUILDERS if name not in plans
                     for why in [_refusal(name, facts.graph, spec)] if why},
        trials=trials, scaling=scaling, recommended=chosen.builder, recommended_by=chosen_by, recommended_plan=plans[chosen.builder],
        elapsed_s=time.monotonic() - started,
    )
    return report, plans[chosen.builder]


def _candidates(ranked: list[tuple[Strategy, Prediction]]) -> list[Candidate]:
    """The ranked plans as candidates, each marked when an earlier one already has its plan."""
    candidates: list[Candidate] = []
    originals: list[tuple[Candidate, Strategy]] = []
    for plan, prediction in ranked:
        same = next((c.builder for c, earlier in originals if same_plan(earlier, plan)), None)
        candidate = Candidate(builder=plan.builder, prediction=prediction, same_plan_as=same)
        candidates.append(candidate)
        if same is None:
            originals.append((candidate, plan))
    return candidates


def _run_trials(candidates: list[Candidate], trials: TrialCount, plans: dict[str, Strategy], facts: PlanningFacts,
                remote: RemoteNodes, script: Path, script_args: list[str], job_id: str, options: ProfileOptions,
                records: Records | None) -> None:
    """Try the best-predicted distinct plans one after another, setting each candidate's `trial`,
    and record those that measured a rate."""
    distinct = [c for c in candidates if c.same_plan_as is None]
    count = len(distinct) if trials == "all" else min(trials, len(distinct))
    for number, candidate in enumerate(distinct[:count], start=1):
        plan = plans[candidate.builder]
        ui.print_status(f"trial {number}/{count}: {candidate.builder}, {options.trial_steps} steps per worker ...")
        trial_id = f"{job_id}-t{number}-{candidate.builder.lower()}"
        candidate.trial, report = run_trial(facts.spec, remote, script, script_args, plan, options.trial_steps,
                                            trial_id, command=options.command, spec_path=options.spec_path,
                                            allow_exposed=options.allow_exposed)
        if records is None or report is None:
            continue
        record = trial_from_report(report, facts.spec, plan, workload_name(script, script_args), facts.profile,
                                   facts.network)
        if record is not None:
            _keep(records, record)


def _refusal(builder: str, item: GraphItem, spec: ClusterSpec) -> str | None:
    """Why `builder` (left out of the ranking) cannot plan `item` on `spec`."""
    try:
        build_strategy(builder, item, spec)
    except UserError as e:
        return str(e)
    return None


def _keep(records: Records, record: TrialRecord) -> None:
    """Record a trial; a database that cannot be written is a warning: the measurement still counts."""
    try:
        number = records.add_trial(record)
    except UserError as e:
        ui.print_warning(f"the trial was not recorded: {e}")
        return
    ui.print_status(f"recorded as trial {number} in {records.path}")
