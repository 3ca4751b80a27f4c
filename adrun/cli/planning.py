"""From `--strategy NAME|FILE` to a plan: what `adrun run` and `adrun strategy build` both do before
anything runs.

One path: what `--strategy` names is checked first (`chosen_plan`: a document is loaded and
validated, a builder name and its options configured; no `--strategy`: the default builder, Auto,
for graph-mode and TF2 scripts alike), before the slow part; then the script is captured (its graph
is the key of the plans remembered for it); then the facts the builder declares it needs are gathered (adrun/gathering.py: profile, records,
network) and the builder builds the plan from them, a pure function (a document is checked against
the captured graph instead).

A builder that needs a profiling run (Auto) is slow to plan; its plan is remembered in the records
(`Records.save_plan`, by `plan_key`: graph, cluster, network facts, builder and options, adrun
version), so that starting the same script on the same cluster again costs the capture only. A plan
made without a timed step (`ModelProfile.untimed`) is not remembered: a longer run profiles anew.
Such a builder's capture is the start of its profiling run (`gathering.started`): the process waits
at the capture point while the plan is looked up, then stops, or goes on to the profile, so that a
first start starts the script once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from adrun.errors import UserError

if TYPE_CHECKING:
    from adrun.capture_run import CaptureThenProfile
    from adrun.gathering import FactSources
    from adrun.graph_item import GraphItem
    from adrun.strategies.base import StrategyBuilder
    from adrun.strategies.document import Strategy
    from adrun.strategies.planning_facts import Fact

DEFAULT_BUILDER = "Auto"


@dataclass(frozen=True)
class ChosenPlan:
    """What `--strategy` and `--strategy-opt` ask for, checked: a strategy document read from
    `source`, or a configured builder (no `--strategy`: DEFAULT_BUILDER with the options)."""

    source: str = ""  # what --strategy said: the document's path or the builder's name ("": not given)
    document: Strategy | None = None
    builder: StrategyBuilder | None = None

    @property
    def needs(self) -> frozenset[Fact]:
        """The facts to gather beyond the graph (a document needs none)."""
        return self.builder.needs if self.builder is not None else frozenset()


def chosen_plan(strategy: str | None, options: dict[str, str]) -> ChosenPlan:
    """What `--strategy` names (None: not given, the default builder, Auto: it plans what the
    cluster and the script's runtime can run, a TF2 script included) with `--strategy-opt`
    `options`; UserError for an unknown builder or option, options given to a document, or an
    invalid document. Everything that can be checked without the script is checked here, before
    the capture, which takes seconds."""
    from adrun.strategies import configured_builder
    from adrun.strategies.document import load_strategy

    if strategy is None:
        return ChosenPlan(builder=configured_builder(DEFAULT_BUILDER, options))
    if _names_document(strategy):
        if options:
            raise UserError("--strategy-opt applies to a builder name, not to a strategy document")
        return ChosenPlan(source=strategy, document=load_strategy(Path(strategy)))
    return ChosenPlan(source=strategy, builder=configured_builder(strategy, options))


def plan_script(chosen: ChosenPlan, sources: FactSources) -> tuple[GraphItem, Strategy]:
    """The Strategy for this cluster and the script's graph: the document (checked against the
    captured graph), a remembered plan, or the builder's plan from the facts it needs."""
    from adrun.gathering import capture, gather_facts, started
    from adrun.strategies.document import check_matches
    from adrun.strategies.planning_facts import Fact

    if chosen.builder is not None and Fact.PROFILE in chosen.builder.needs:
        with started(sources) as run:  # one start: the graph, then the profile if no plan is remembered
            return _remembered_or_built(chosen.builder, run, sources)
    if chosen.document is not None:
        graph = capture(sources)
        check_matches(chosen.document, graph, sources.spec, source=chosen.source)
        return graph, chosen.document
    assert chosen.builder is not None
    facts = gather_facts(chosen.builder.needs, sources)  # captures the graph
    return facts.graph, chosen.builder.build(facts)


def _remembered_or_built(builder: StrategyBuilder, run: CaptureThenProfile,
                         sources: FactSources) -> tuple[GraphItem, Strategy]:
    """The plan remembered for this graph, cluster, network, builder and adrun (the process `run`
    is then told to stop), else the builder's from `run`'s profile (remembered unless made without
    a timed step; with --no-record nothing is looked up or remembered)."""
    from adrun import ui
    from adrun.gathering import gather_facts, network_facts
    from adrun.records.store import cluster_key, plan_key

    graph = run.graph()
    records = sources.records
    if records is None:
        facts = gather_facts(builder.needs, sources, graph, run=run)
        return facts.graph, builder.build(facts)
    name = type(builder).__name__
    network = network_facts(sources)
    key = plan_key(graph.fingerprint, cluster_key(sources.spec), network, name,
                   builder.options.model_dump(mode="json"))
    remembered = records.plan_for(key)
    if remembered is not None:
        ui.print_status(f"{name}: the plan made earlier for this graph on this cluster (records {records.path})")
        return graph, remembered
    facts = gather_facts(builder.needs, sources, graph, network, run=run)
    plan = builder.build(facts)
    if facts.profile is not None and not facts.profile.untimed:
        records.save_plan(key, plan)
    return facts.graph, plan


def _names_document(strategy: str) -> bool:
    """Whether `--strategy` names a strategy document rather than a builder. A name the file system
    cannot even look up (too long, say) is no document: it is then reported as an unknown builder."""
    if strategy.endswith((".yml", ".yaml")):
        return True
    try:
        return Path(strategy).is_file()
    except OSError:
        return False
