"""From `--strategy NAME|FILE` to a plan: what `adrun run` and `adrun strategy build` both do before
anything runs.

One path: what `--strategy` names is checked first (`chosen_plan`: a document is loaded and
validated, a builder name and its options configured), before the slow part; then the script is
captured (its graph names the default builder, `default_builder`, and the plans remembered for it);
then the facts the builder declares it needs are gathered (adrun/gathering.py: profile, records,
network) and the builder builds the plan from them, a pure function (a document is checked against
the captured graph instead).

A builder that needs a profiling run (Auto) is slow to plan; its plan is remembered in the records
(`Records.save_plan`, by `plan_key`: graph, cluster, network facts, builder and options, adrun
version), so that starting the same script on the same cluster again costs the capture only. A plan
made without a timed step (`ModelProfile.untimed`) is not remembered: a longer run profiles anew.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from adrun.errors import UserError

if TYPE_CHECKING:
    from adrun.gathering import FactSources
    from adrun.graph_item import GraphItem
    from adrun.strategies.base import StrategyBuilder
    from adrun.strategies.document import Strategy
    from adrun.strategies.planning_facts import Fact

DEFAULT_BUILDER = "Auto"
TF2_DEFAULT_BUILDER = "AllReduce"


@dataclass(frozen=True)
class ChosenPlan:
    """What `--strategy` and `--strategy-opt` ask for, checked: a strategy document read from
    `source`, or a configured builder, or neither: the default builder for the script
    (`default_builder`, known once the script is captured), configured with `options`."""

    source: str = ""  # what --strategy said: the document's path or the builder's name
    document: Strategy | None = None
    builder: StrategyBuilder | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def needs(self) -> frozenset[Fact]:
        """The facts to gather beyond the graph for a named builder (a document needs none; the
        default builder is known once the script is captured)."""
        return self.builder.needs if self.builder is not None else frozenset()


def default_builder(item: GraphItem) -> str:
    """The builder a run uses when no `--strategy` is given, for the script captured as `item`: Auto
    for graph mode (it plans what the cluster can run, from a profile or, for a script too short to
    time, from the model's facts); AllReduce for TF2 scripts, which Auto does not plan yet (TF2 mode
    plans only what strategies/document.py tf2_refusals allows)."""
    return TF2_DEFAULT_BUILDER if item.kind == "tf2" else DEFAULT_BUILDER


def chosen_plan(strategy: str | None, options: dict[str, str]) -> ChosenPlan:
    """What `--strategy` names (None: not given) with `--strategy-opt` `options`; UserError for an
    unknown builder or option, options given to a document, or an invalid document. Everything
    that can be checked without the script is checked here, before the capture, which takes seconds."""
    from adrun.strategies import configured_builder
    from adrun.strategies.document import load_strategy

    if strategy is None:
        return ChosenPlan(options=options)
    if _names_document(strategy):
        if options:
            raise UserError("--strategy-opt applies to a builder name, not to a strategy document")
        return ChosenPlan(source=strategy, document=load_strategy(Path(strategy)))
    return ChosenPlan(source=strategy, builder=configured_builder(strategy, options))


def plan_script(chosen: ChosenPlan, sources: FactSources) -> tuple[GraphItem, Strategy]:
    """The Strategy for this cluster and the script's graph: the document (checked against the
    captured graph), a remembered plan, or the builder's plan from the facts it needs."""
    from adrun.gathering import capture
    from adrun.strategies import configured_builder
    from adrun.strategies.document import check_matches

    if chosen.builder is not None and not _remembers(chosen.builder, sources):
        return _built(chosen.builder, sources, None)  # the profile, if any, captures the graph itself
    graph = capture(sources)
    if chosen.document is not None:
        check_matches(chosen.document, graph, sources.spec, source=chosen.source)
        return graph, chosen.document
    builder = chosen.builder or configured_builder(default_builder(graph), chosen.options)
    if not _remembers(builder, sources):
        return _built(builder, sources, graph)
    return _remembered_or_built(builder, graph, sources)


def _remembers(builder: StrategyBuilder, sources: FactSources) -> bool:
    """Whether `builder`'s plans are remembered: it profiles the script, and there are records."""
    from adrun.strategies.planning_facts import Fact

    return Fact.PROFILE in builder.needs and sources.records is not None


def _built(builder: StrategyBuilder, sources: FactSources, graph: GraphItem | None) -> tuple[GraphItem, Strategy]:
    from adrun.gathering import gather_facts

    facts = gather_facts(builder.needs, sources, graph)
    return facts.graph, builder.build(facts)


def _remembered_or_built(builder: StrategyBuilder, graph: GraphItem,
                         sources: FactSources) -> tuple[GraphItem, Strategy]:
    """The plan remembered for this graph, cluster, network, builder and adrun, else the builder's
    (remembered unless made without a timed step)."""
    from adrun import ui
    from adrun.gathering import gather_facts, network_facts
    from adrun.records.store import cluster_key, plan_key

    records = sources.records
    assert records is not None
    name = type(builder).__name__
    network = network_facts(sources)
    key = plan_key(graph.fingerprint, cluster_key(sources.spec), network, name,
                   builder.options.model_dump(mode="json"))
    remembered = records.plan_for(key)
    if remembered is not None:
        ui.print_status(f"{name}: the plan made earlier for this graph on this cluster (records {records.path})")
        return graph, remembered
    facts = gather_facts(builder.needs, sources, graph, network)
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
