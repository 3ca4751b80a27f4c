"""From `--strategy NAME|FILE` to a plan: what `adrun run` and `adrun strategy build` both do before
anything runs.

One path: what `--strategy` names is checked first (`chosen_plan`: a document is loaded and
validated, a builder name and its options configured), before the slow part; then the facts that
builder declares it needs are gathered (adrun/gathering.py: capture or profile, records, network);
then the builder builds the plan from them, a pure function (a document is checked against the
captured graph instead).
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

DEFAULT_BUILDER = "PSLoadBalancing"


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
        """The facts to gather beyond the graph: the builder's (a document and the default builders need none)."""
        return self.builder.needs if self.builder is not None else frozenset()


def default_builder(item: GraphItem) -> str:
    """The builder a run uses when no `--strategy` is given, for the script captured as `item`:
    PSLoadBalancing for graph mode; AllReduce for TF2 scripts, since TF2 mode synchronizes by
    collectives only (strategies/document.py, TF2_NO_PS)."""
    return "AllReduce" if item.kind == "tf2" else DEFAULT_BUILDER


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
    """Gather the facts `chosen` needs from `sources` and turn them into the Strategy for this
    cluster: the document (checked against the captured graph) or the builder's plan."""
    from adrun.gathering import gather_facts
    from adrun.strategies import configured_builder
    from adrun.strategies.document import check_matches

    facts = gather_facts(chosen.needs, sources)
    if chosen.document is not None:
        check_matches(chosen.document, facts.graph, sources.spec, source=chosen.source)
        return facts.graph, chosen.document
    builder = chosen.builder or configured_builder(default_builder(facts.graph), chosen.options)
    return facts.graph, builder.build(facts)



def _names_document(strategy: str) -> bool:
    """Whether `--strategy` names a strategy document rather than a builder. A name the file system
    cannot even look up (too long, say) is no document: it is then reported as an unknown builder."""
    if strategy.endswith((".yml", ".yaml")):
        return True
    try:
        return Path(strategy).is_file()
    except OSError:
        return False
