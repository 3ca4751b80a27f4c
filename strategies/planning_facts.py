"""Everything a plan is built from, as one object: building a plan is then a pure function of it.

The launching side gathers the facts first (adrun/gathering.py: it captures or profiles the
script, reads the records, measures the network, and says so on the terminal); a builder
(`StrategyBuilder.build(facts)`) only computes, and declares in `needs` which facts beyond the
graph and the cluster spec it reads, so that nothing slow is gathered for a builder that does not
use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adrun.graph_item import GraphItem
    from adrun.spec import ClusterSpec

    from .facts import ModelProfile, NetworkFacts
    from .fit import FitResult


class Fact(str, Enum):
    """A fact a builder may need beyond the graph and the cluster spec (PlanningFacts' field)."""

    PROFILE = "profile"  # a profiling run of the script: its step time and rows touched (slow)
    NETWORK = "network"  # the cluster's bandwidth and latency (the spec's, stored, or measured)
    FIT = "fit"  # the cost model's coefficients fitted on the records of this cluster


@dataclass(frozen=True)
class PlanningFacts:
    """The facts of one planning: always the cluster and the captured graph; the others when a
    builder needs them (None: not gathered)."""

    spec: ClusterSpec
    graph: GraphItem
    profile: ModelProfile | None = None  # its graph is `graph`
    network: NetworkFacts | None = None
    fit: FitResult | None = None

    def __post_init__(self) -> None:
        if self.profile is not None and self.profile.graph.fingerprint != self.graph.fingerprint:
            raise ValueError(f"the profile is of graph {self.profile.graph.fingerprint}, "
                             f"not of this graph ({self.graph.fingerprint})")

    def missing(self, needs: frozenset[Fact]) -> list[Fact]:
        """Those of `needs` that were not gathered, in Fact order."""
        return [fact for fact in Fact if fact in needs and getattr(self, fact.value) is None]
