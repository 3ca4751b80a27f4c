"""The Auto pipeline shared by `adrun run --strategy Auto`, `adrun strategy build Auto` and
`adrun profile`: profile the script, get the cluster's network facts, fit the cost model on this
cluster's records, and rank every built-in builder's plan and Auto's.

profile_model (one process) ─┐
network facts (stored, else measured) ─┼─► fit(records of this cluster) ─► rank_builders ─► AutoPlan
records of this cluster ─────┘

The profile and the network facts are saved in the records, so that later runs of the same graph
and cluster are recorded with them (adrun/records/recording.py) and later plans reuse the network facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adrun import ui
from adrun.launch.job.provision import RemoteNodes
from adrun.model_io import validate
from adrun.records.store import Records, cluster_key
from adrun.spec import ClusterSpec
from adrun.strategies.auto import AUTO, AutoOptions, rank_builders
from adrun.strategies.document import Strategy
from adrun.strategies.facts import ModelProfile, NetworkFacts, Prediction
from adrun.strategies.fit import FitResult, fit

# Auto plans whatever the script's length, so a script of a few steps must still leave timed steps
# after the warm-up; the profile's median step time already discounts a slow early step or two.
PROFILE_WARMUP = 1


@dataclass(frozen=True)
class AutoPlan:
    """Everything the pipeline found: what `adrun profile` reports and what a run plans with."""

    profile: ModelProfile
    network: NetworkFacts
    fit: FitResult
    ranked: list[tuple[Strategy, Prediction]]  # every built-in builder's plan and Auto's, best predicted first

    @property
    def plan(self) -> Strategy:
        """Auto's plan."""
        return next(plan for plan, _ in self.ranked if plan.builder == AUTO)

    @property
    def prediction(self) -> Prediction:
        """The cost model's prediction of Auto's plan."""
        return next(prediction for plan, prediction in self.ranked if plan.builder == AUTO)


def auto_options(cli: Mapping[str, str]) -> AutoOptions:
    """Auto's options from `--strategy-opt KEY=VALUE` pairs; UserError naming a bad one."""
    return validate(AutoOptions, dict(cli), f"{AUTO} options")


def plan_automatically(script: Path, script_args: list[str], spec: ClusterSpec, remote: RemoteNodes,
                       records: Records | None, options: AutoOptions, job_id: str, *,
                       measure_network: bool = False, warmup: int = PROFILE_WARMUP) -> AutoPlan:
    """Run the pipeline for `script` on `spec` (remote nodes through `remote`, connected here if
    the network must be measured and they are not yet). `records` None (--no-record): nothing is
    read or saved, the cost model keeps its analytical coefficients and the network is measured.
    The network facts are the spec's `network` field when it has one, else those stored for this
    cluster unless `measure_network`, else measured."""
    from adrun.profile.run import profile_model

    key = cluster_key(spec)
    ui.print_status(f"profiling {script} on one process ...")
    profile = profile_model(script, script_args, spec.num_workers, job_id, warmup=warmup)
    network = None if records is None or measure_network or spec.network else records.network_for(key)
    if network is None:
        network = _network(spec, remote)
    if records is not None:
        records.save_profile(profile)
        records.save_network(key, network)
    fitted = fit(records.trials(key) if records is not None else [], cluster_key=key)
    ui.print_status(fit_summary(fitted))
    ranked = rank_builders(profile.graph, spec, profile, network, coefficients=fitted.coefficients, options=options)
    return AutoPlan(profile=profile, network=network, fit=fitted, ranked=ranked)


def _network(spec: ClusterSpec, remote: RemoteNodes) -> NetworkFacts:
    from adrun.launch.nodes.network_facts import network_facts

    if spec.network is None:
        ui.print_status("measuring the network ...")
        if remote.nodes and not remote.links:
            remote.connect()
    return network_facts(spec, remote)


def fit_summary(fitted: FitResult) -> str:
    """One line: how many records the cost model was fitted on, and its error on them."""
    skipped = (f"; {fitted.records_skipped} record(s) without a profile or network facts left out"
               if fitted.records_skipped else "")
    if not fitted.records_used:
        return f"cost model: analytical coefficients (no usable records of this cluster{skipped})"
    return (f"cost model fitted on {fitted.records_used} record(s) of this cluster: mean step-time error "
            f"{fitted.error_after:.0%} (analytical {fitted.error_before:.0%}){skipped}")
