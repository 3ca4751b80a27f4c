"""Bytes per step each host must send under an adrun plan: the strategy family's lower bound.

The bound itself is `adrun.strategies.wire_bound.lower_bound` (PS pulls and pushes of the distinct
touched rows, partitioned PS, ring all-reduce, all-gather for sparse; same-host transfers left
out; docs/performance.md, "Bytes on the wire"); this module feeds it the benchmark's cluster and
the distinct rows each worker's batches touch (`touched_rows.py`) and the captured graph's pooled
lookups, and says which bound it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adrun.graph_item import GraphItem, PooledBags
from adrun.spec import ClusterSpec
from adrun.strategies.document import Strategy
from adrun.strategies.wire_bound import lower_bound as family_bound

FAMILY_METHOD = "strategies/wire_bound.py (distinct rows per step from the workload's data)"


def pooled_facts(graph: GraphItem) -> dict[str, PooledBags]:
    """The captured graph's pooled lookups by variable (`VariableInfo.pooled`); whether a plan
    pools them (its pieces, workers and replicas) is the bound's own rule, wire_bound.pooled_bags."""
    return {v.name: v.pooled for v in graph.variables if v.pooled is not None}


def lower_bound(plan: Strategy, spec: ClusterSpec, distinct_rows: Mapping[str, Sequence[int]],
                pooled: Mapping[str, PooledBags]) -> tuple[list[float], str]:
    """Bytes each node of `spec` (in node order) must send per step under `plan`, and which bound it is.
    `distinct_rows`: per sparse variable or shard (`name/part_i`), the distinct rows each worker
    touches in a step; `pooled`: the graph's pooled lookups (`pooled_facts`), so that a plan whose
    lookups pool on the PS is judged against its partial sums, not rows it does not send."""
    bound = family_bound(plan, distinct_rows, spec, pooled)
    return [float(bound.per_host[node.address].sent) for node in spec.nodes], FAMILY_METHOD
