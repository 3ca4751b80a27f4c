"""All-reduce builder: every worker keeps a replica of each variable and gradients are averaged."""

from __future__ import annotations

from pydantic import Field

from adrun.graph_item import VariableInfo
from adrun.spec import ClusterSpec

from .base import BuilderOptions, StrategyBuilder
from .document import AllReduceSync


class AllReduceOptions(BuilderOptions):
    chunk_size: int = Field(
        default=128, ge=1, description="variables per all-reduce group, in creation order"
    )


class AllReduce(StrategyBuilder):
    """Every variable replicated on every worker; gradients averaged by collective all-reduce.

    Variables are grouped in creation order, `chunk_size` per group (default 128); each group is one
    collective, so a larger chunk means fewer, bigger messages. Choose it when there is no PS process,
    or when the model is dense and workers have similar speed: traffic is spread over all workers
    instead of concentrated on PS processes. Sparse gradients are all-gathered, which grows with the
    worker count; for large embeddings a PS builder is usually cheaper.
    """

    Options = AllReduceOptions
    options: AllReduceOptions

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[AllReduceSync]:
        return [AllReduceSync(group=i // self.options.chunk_size) for i in range(len(variables))]
