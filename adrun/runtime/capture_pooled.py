"""Capture's facts about lookups pooled over their bags (GraphItem's `VariableInfo.pooled`).

The planner counts a PS-held table whose lookups are pooled on the PS by per-example sums rather
than rows (strategies/wire_bound.py), so capture must say which tables those are and how many
examples and ids a step reads. The runtime's own matcher decides (runtime/kernels/pooled_lookups.py),
run here with every variable taken to be on a PS task: whether a table lands on one is the plan's
choice, which the cost model reads from the plan. A variable counts as pooled only when every
lookup of it is matched; one refused lookup keeps its rows on the wire, and then the variable
keeps today's terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from adrun.graph_item import PooledBags
from adrun.runtime.grads import variable_name
from adrun.runtime.kernels.pooled_lookups import PooledLookup, pooled_lookups

# any PS device: the matcher only asks whether a variable's device is a PS task's
_ON_A_PS = "/job:ps/task:0"


def pooled_bags(graph: tf.Graph, variables: Sequence[tf.Variable], logical: dict[str, str],
                grads_and_vars: Sequence[tuple[Any, Any]], batch_size: int | None) -> dict[str, PooledBags]:
    """Per variable (by its logical name: `logical` maps each variable's, or shard's, op name to
    it), what its pooled lookups read per step, for the variables all of whose lookups could be
    pooled. `batch_size`: the examples per step when a lookup's own shape does not say (the graph's
    tf.data batch, or the batch the profiling run fed). A lookup over a Python list of separate
    variables (`embedding_lookup([v0, v1], ids)`), which the matcher pools like a partitioned one,
    counts for each of them: every one returns [examples, dim] sums, and each is given an even
    share of the ids (what the `mod` and `div` strategies give uniform ids)."""
    devices = {variable_name(v): _ON_A_PS for v in variables}
    gradients = {variable_name(v): g for g, v in grads_and_vars if g is not None}
    matches = pooled_lookups(graph, devices, gradients)
    refused = {logical.get(name, name) for r in matches.refused for op in r.ops for name in _handles(op)}
    found: dict[str, list[tuple[PooledLookup, int]]] = {}  # variable -> its lookups, each with its variables' count
    for lookup in matches.pooled:
        names = {logical.get(s.variable, s.variable) for s in lookup.shards}
        for name in names:
            found.setdefault(name, []).append((lookup, len(names)))
    # one refused lookup keeps the variable's rows on the wire (e.g. a max beside a pooled mean)
    return {name: _facts(lookups, batch_size) for name, lookups in found.items() if name not in refused}


def _handles(op: tf.Operation) -> list[str]:
    """The variables a refused op reads: a gather's table, or a control-flow op's resource inputs."""
    return [t.op.name for t in op.inputs if t.dtype == tf.resource]


def _facts(lookups: list[tuple[PooledLookup, int]], batch_size: int | None) -> PooledBags:
    examples: list[int | None] = []
    ids: list[int | None] = []
    for lookup, sharing in lookups:
        static = tf.compat.dimension_value(lookup.batch)
        b = static if static is not None else batch_size
        examples.append(b)
        if lookup.bag_axis is None or b is None:
            ids.append(None)  # a sparse lookup's ids are counted at run time only
            continue
        bag = lookup.ids.shape[1:]
        ids.append(b * math.prod(bag.as_list()) // sharing if bag.is_fully_defined() else None)
    return PooledBags(examples=_sum(examples), ids=_sum(ids))


def _sum(counts: list[int | None]) -> int | None:
    return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)
