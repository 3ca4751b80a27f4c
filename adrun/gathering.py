"""Gathering the facts a plan is built from (launching side): what `adrun run`, `adrun strategy
build` and `adrun profile` do before a builder computes a plan from them.

Every builder needs the captured graph and the cluster spec; Auto (`Auto.needs`) also needs:

the profile (the process that captured the graph goes on: `started`) ─┐
network facts (the spec's, else stored for this cluster, else measured) ─┼─► PlanningFacts
fit(records of this cluster) ───────────────────────────────────────┘

This is the part that is slow, reaches the nodes, reads and writes the records and says on the
terminal what it does; building from the PlanningFacts is pure (strategies/planning_facts.py). The
profile and the network facts are saved in the records, so that later runs of the same graph and
cluster are recorded with them (adrun/records/recording.py) and later plans reuse the network facts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from adrun import ui
from adrun.launch.job.provision import RemoteNodes
from adrun.records.store import Records, cluster_key
from adrun.spec import ClusterSpec
from adrun.strategies.facts import ModelProfile, NetworkFacts
from adrun.strategies.fit import FitResult, fit
from adrun.strategies.planning_facts import Fact, PlanningFacts

if TYPE_CHECKING:
    from adrun.capture_run import CaptureThenProfile
    from adrun.graph_item import GraphItem

# Auto plans whatever the script's length, so a script of a few steps must still leave timed steps
# after the warm-up; the profile's median step time already discounts a slow early step or two.
PROFILE_WARMUP = 1


@dataclass(frozen=True)
class FactSources:
    """Where the facts come from: the script (captured or profiled), the cluster (remote nodes
    through `remote`, connected here if the network must be measured and they are not yet), and
    the records (None, --no-record: nothing is read or saved, the cost model keeps its analytical
    coefficients and the network is measured). `measure_network`: measure even when the records
    hold this cluster's network facts."""

    script: Path
    script_args: list[str]
    spec: ClusterSpec
    job_id: str
    remote: RemoteNodes
    records: Records | None
    measure_network: bool = False


def capture(sources: FactSources) -> GraphItem:
    """The script's graph, captured (a run of the script up to its first training step)."""
    from adrun.capture_run import capture_graph

    ui.print_status(f"capturing the graph of {sources.script} ...")
    return capture_graph(sources.script, sources.script_args, sources.spec.num_workers, sources.job_id)


@contextmanager
def started(sources: FactSources) -> Iterator[CaptureThenProfile]:
    """The script started once for its graph and, if asked, its profile (capture_run.py): what a
    builder that profiles starts, so that looking its plan up and profiling cost one start. The
    process is gone when the block ends."""
    from adrun.capture_run import CaptureThenProfile
    from adrun.profile.run import DEFAULT_STEPS

    ui.print_status(f"capturing the graph of {sources.script} ...")
    with CaptureThenProfile(sources.script, sources.script_args, sources.spec.num_workers, sources.job_id,
                            (PROFILE_WARMUP, DEFAULT_STEPS)) as run:
        yield run


def gather_facts(needs: frozenset[Fact], sources: FactSources, graph: GraphItem | None = None,
                 network: NetworkFacts | None = None, run: CaptureThenProfile | None = None) -> PlanningFacts:
    """The graph (profiled when the profile is needed, else `graph` when already captured, else
    captured) and the facts of `needs`; `network`: the network facts when already gathered; `run`:
    the script's process that captured `graph`, which goes on to the profile (else one is started)."""
    spec, records = sources.spec, sources.records
    key = cluster_key(spec)
    profile = None
    if Fact.PROFILE in needs:
        if run is None:
            with started(sources) as own:
                profile = _profile(sources, own)
        else:
            profile = _profile(sources, run)
        graph = profile.graph
    elif graph is None:
        graph = capture(sources)
    if Fact.NETWORK in needs and network is None:
        network = network_facts(sources)
    fitted = None
    if Fact.FIT in needs:
        fitted = fit(records.trials(key) if records is not None else [], cluster_key=key)
        ui.print_status(fit_summary(fitted))
    return PlanningFacts(spec=spec, graph=graph, profile=profile, network=network if Fact.NETWORK in needs else None,
                         fit=fitted)


def _profile(sources: FactSources, run: CaptureThenProfile) -> ModelProfile:
    """The script profiled by `run`, the process that captured it (and saved in the records); a
    script that ends before a step could be timed gets the profile of its facts alone
    (`ModelProfile.of_facts`, not saved), so that a smoke test of a script is planned rather than
    refused."""
    from adrun.profile.run import NoStepTimed, profile_of

    run.graph()  # the capture's errors first, as a start that only captures reports them
    ui.print_status(f"profiling {sources.script} on one process ...")
    try:
        profile = profile_of(sources.script, run.profile_samples(), PROFILE_WARMUP)
    except NoStepTimed as e:
        ui.print_status(f"{e.fact}: planning from the model's facts and the network alone")
        return ModelProfile.of_facts(e.graph)
    if sources.records is not None:
        sources.records.save_profile(profile)
    return profile


def network_facts(sources: FactSources) -> NetworkFacts:
    """The spec's network facts, else those stored for this cluster unless `measure_network`, else
    measured (and stored)."""
    from adrun.launch.nodes.network_facts import network_facts as measured_facts

    spec, records, remote = sources.spec, sources.records, sources.remote
    key = cluster_key(spec)
    stored = None if records is None or sources.measure_network or spec.network else records.network_for(key)
    if stored is not None:
        return stored
    if spec.network is None:
        ui.print_status("measuring the network ...")
        if remote.nodes and not remote.links:
            remote.connect()
    network = measured_facts(spec, remote, ui.print_status)
    if records is not None:
        records.save_network(key, network)
    return network


def fit_summary(fitted: FitResult) -> str:
    """One line: how many records the cost model was fitted on, and its error on them."""
    skipped = (f"; {fitted.records_skipped} record(s) without a profile or network facts left out"
               if fitted.records_skipped else "")
    if not fitted.records_used:
        return f"cost model: analytical coefficients (no usable records of this cluster{skipped})"
    return (f"cost model fitted on {fitted.records_used} record(s) of this cluster: mean step-time error "
            f"{fitted.error_after:.0%} (analytical {fitted.error_before:.0%}){skipped}")
