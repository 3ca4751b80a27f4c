"""Answers the runtime asks of a Strategy (through `TaskContext.plan`): which synchronizer a variable (or shard) has.

Partitioned variables exist in a worker's graph as TF shards named `<variable>/part_<i>`
(TF's own PartitionedVariable naming); shard i follows `partition.shards[i]`.
"""

from __future__ import annotations

import re
from functools import cached_property

from adrun.strategies.document import AllReduceSync, Partition, PSSync, Strategy

_SHARD_NAME = re.compile(r"(?P<base>.+)/part_(?P<index>\d+)")


class PlanIndex:
    def __init__(self, strategy: Strategy) -> None:
        self._plans = {v.name: v for v in strategy.variables}

    def synchronizer(self, name: str) -> PSSync | AllReduceSync | None:
        """The synchronizer of a variable or shard by op name; None if the plan does not name it."""
        plan = self._plans.get(name)
        if plan is not None and plan.sync is not None:
            return plan.sync
        shard = _SHARD_NAME.fullmatch(name)
        if shard is None:
            return None
        base = self._plans.get(shard["base"])
        if base is None or base.partition is None or int(shard["index"]) >= len(base.partition.shards):
            return None
        return base.partition.shards[int(shard["index"])]

    def partition(self, name: str) -> Partition | None:
        plan = self._plans.get(name)
        return plan.partition if plan is not None else None

    @cached_property
    def uses_ps(self) -> bool:
        return any(isinstance(s, PSSync) for plan in self._plans.values() for s in plan.synchronizers())
