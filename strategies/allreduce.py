"""All-reduce builder: every worker keeps a replica of each variable and gradients are averaged.

`plan_allreduce` is shared with the partitioned all-reduce builders: it numbers groups over the
flattened list of shards and applies a compressor to dense gradients only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

from pydantic import Field

from adrun.graph_item import VariableInfo
from adrun.spec import ClusterSpec

from .base import BuilderOptions, Decision, PerVariableBuilder, join_notes
from .document import AllReduceSync, Compressor, Partition, Synchronizer

# (axis, shard count, note) for one variable; axis None or count < 2 = keep whole.
AxisChoice = tuple[int | None, int, str | None]


class AllReduceOptions(BuilderOptions):
    chunk_size: int = Field(
        default=128, ge=1, description="variables (or shards) per all-reduce group, in creation order"
    )
    compressor: Compressor = Field(
        default="none",
        description="dense gradients only: fp16 (half precision), fp16-ef (fp16 with error feedback), "
        "powersgd (low-rank), none",
    )
    powersgd_rank: int = Field(
        default=1, ge=1, description="rank of the powersgd approximation (other compressors ignore it)"
    )


class _Compression(TypedDict, total=False):
    """AllReduceSync's compression fields; those left out keep the document's defaults."""

    compressor: Compressor
    powersgd_rank: int


def plan_allreduce(
    variables: list[VariableInfo],
    chunk_size: int,
    compressor: Compressor = "none",
    powersgd_rank: int = 1,
    choose: Callable[[VariableInfo], AxisChoice] | None = None,
) -> list[Decision]:
    """All-reduce decisions for `variables`. `choose` gives each variable's partition (default: none).

    Groups are numbered over the flattened list of shards (a whole variable counts as one):
    group = running index // chunk_size. Sparse gradients are never compressed; a note says so when a
    compressor was asked for.
    """
    decisions = []
    index = 0
    for var in variables:
        axis, count, note = choose(var) if choose is not None else (None, 1, None)
        if var.grad == "sparse" and compressor != "none":
            kwargs: _Compression = {}
            note = join_notes(
                note, f"compressor {compressor} not applied: sparse gradients are all-gathered uncompressed"
            )
        else:
            kwargs = {"compressor": compressor, "powersgd_rank": powersgd_rank}
        if axis is None or count < 2:
            decisions.append(Decision(sync=AllReduceSync(group=index // chunk_size, **kwargs), note=note))
            index += 1
        else:
            shards: list[Synchronizer] = [AllReduceSync(group=(index + i) // chunk_size, **kwargs) for i in range(count)]
            decisions.append(Decision(partition=Partition(axis=axis, shards=shards), note=note))
            index += count
    return decisions


class AllReduce(PerVariableBuilder):
    """Every variable replicated on every worker; gradients averaged by collective all-reduce.

    Variables are grouped in creation order, `chunk_size` per group (default 128); each group is one
    collective, so a larger chunk means fewer, bigger messages. `compressor` (default none; fp16,
    fp16-ef, powersgd) shrinks dense gradients before they are sent, trading precision for bandwidth;
    `powersgd_rank` (default 1) is the rank of the powersgd approximation. Sparse gradients are
    all-gathered and never compressed (the plan notes it when a compressor was asked for).

    Choose it when there is no PS process, or when the model is dense and workers have similar speed:
    traffic is spread over all workers instead of concentrated on PS processes. Sparse gradients are
    all-gathered, which grows with the worker count; for large embeddings Parallax or a PS builder is
    usually cheaper.
    """

    Options = AllReduceOptions
    options: AllReduceOptions

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[Decision]:
        o = self.options
        return plan_allreduce(variables, o.chunk_size, o.compressor, o.powersgd_rank)
