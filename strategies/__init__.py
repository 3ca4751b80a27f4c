"""Strategy builders (registry) and the Strategy document (`adrun.strategies.document`).

Nothing here imports TensorFlow, the launcher or sessions: a builder sees only the PlanningFacts it
is given (`adrun.strategies.planning_facts`: the GraphItem, the ClusterSpec, and for Auto the
model profile, the network facts and the fitted cost model).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from adrun.errors import UserError
from adrun.graph_item import GraphItem
from adrun.spec import ClusterSpec

from .allreduce import AllReduce
from .base import StrategyBuilder
from .document import Strategy
from .parallax import Parallax
from .partitioned_ar import PartitionedAR, RandomAxisPartitionAR
from .partitioned_ps import PartitionedPS, UnevenPartitionedPS
from .planning_facts import PlanningFacts
from .ps import PS, PSLoadBalancing

# the built-in builders, which plan from the graph and the spec alone; Auto (strategies/auto.py)
# ranks their plans and searches from the best ones
BUILDERS: dict[str, type[StrategyBuilder]] = {
    b.__name__: b
    for b in (
        PS,
        PSLoadBalancing,
        PartitionedPS,
        UnevenPartitionedPS,
        AllReduce,
        PartitionedAR,
        RandomAxisPartitionAR,
        Parallax,
    )
}


def configured_builder(name: str, options: Mapping[str, str] | None = None) -> StrategyBuilder:
    """The builder called `name` (a built-in one or Auto) with CLI `options`; UserError for an
    unknown name or option.

    Separate from building so the CLI can refuse a mistyped name before gathering the facts, which
    takes seconds.
    """
    from .auto import AUTO, Auto  # loads the cost model (numpy), which the built-in builders do not need

    builder = Auto if name == AUTO else BUILDERS.get(name)
    if builder is None:
        names = [*BUILDERS, AUTO]
        by_lower = {known.lower(): known for known in names}
        close = by_lower.get(name.lower()) or next(iter(difflib.get_close_matches(name, names, n=1)), None)
        hint = f" (did you mean {close}?)" if close else ""
        raise UserError(f"unknown strategy builder '{name}'{hint}; known builders: {', '.join(sorted(names))}")
    return builder.from_cli(options or {})


def build_strategy(
    name: str, graph_item: GraphItem, spec: ClusterSpec, options: Mapping[str, str] | None = None
) -> Strategy:
    """Plan `graph_item` on `spec` with the built-in builder called `name`, configured by CLI `options`
    (a builder that needs more facts is built from gathered PlanningFacts instead)."""
    return configured_builder(name, options).build(PlanningFacts(spec=spec, graph=graph_item))
