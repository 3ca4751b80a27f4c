"""Parameter-server builders: each variable lives on one PS process, which aggregates its gradients."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field, model_validator

from adrun.errors import UserError
from adrun.graph_item import VariableInfo
from adrun.spec import ClusterSpec

from .base import BuilderOptions, Decision, PerVariableBuilder, axis0_rows
from .document import Partition, PSSync, Strategy, check_staleness_needs_sync
from .planning_facts import PlanningFacts


class SyncOptions(BuilderOptions):
    """How a PS applies the workers' gradients; shared by every builder that uses PS processes."""

    sync: bool = Field(default=True, description="wait for every worker's gradient each step; false = asynchronous")
    staleness: int = Field(default=0, ge=0, description="steps a worker may run ahead of the slowest (needs sync)")

    @model_validator(mode="after")
    def _staleness_needs_sync(self) -> SyncOptions:
        check_staleness_needs_sync(self.staleness, self.sync, "sync=true")
        return self


class PSOptions(SyncOptions):
    local_proxy: bool = Field(
        default=False, description="each worker reads a local copy of the variable, refreshed every step"
    )


class ChunkedPSOptions(PSOptions):
    chunk_bytes: int = Field(
        default=1 << 20, ge=0,
        description="a dense variable larger than this is cut on axis 0 into chunks of about this size, all on "
        "its one PS, so that workers pull the first chunks' new values while they still push the last ones "
        "(graph mode, sync, staleness 0); 0 = keep every variable whole",
    )


class ChunkingPSBuilder(PerVariableBuilder):
    """A builder that places whole variables on PS tasks, cutting a large dense one into chunks
    that stay together on its PS.

    A synchronous step pulls a variable, computes, pushes its gradient; the next pull must wait
    for the update. One large variable on a PS of another host then keeps one direction of the
    link busy at a time. In chunks, each chunk's update is applied as soon as its gradient is in,
    and the worker pulls it back (adrun/runtime/kernels/ps_prefetch.py) while later chunks are
    still pushed: both directions carry data at once. The bytes, the placement by bytes and the
    mathematics (TF applies the optimizer to each chunk as to its slice of the whole) are those
    of the whole variable. TF2 mode cannot cut variables: there they stay whole.
    """

    Options = ChunkedPSOptions
    options: ChunkedPSOptions
    _kind = "graph"

    def build(self, facts: PlanningFacts) -> Strategy:
        self._kind = facts.graph.kind
        return super().build(facts)

    def chunked(self, var: VariableInfo, sync: PSSync) -> PSSync | Decision:
        """`sync` for the whole of `var`, or a partition of `var` into chunks all synchronized by it."""
        size, options = self.options.chunk_bytes, self.options
        if not size or self._kind != "graph" or not options.sync or options.staleness or options.local_proxy:
            return sync
        if var.grad != "dense" or var.nbytes <= size:
            return sync
        rows, note = axis0_rows(var)
        count = min(rows, math.ceil(var.nbytes / size))
        if count < 2:
            return Decision(sync=sync, note=note) if note else sync
        return Decision(sync=None, partition=Partition(axis=0, shards=[sync] * count))


def ps_sync(options: SyncOptions, ps_task: int) -> PSSync:
    """A PS synchronizer on `ps_task` with the builder's sync, staleness and (if it has one)
    local_proxy options."""
    return PSSync(
        ps_task=ps_task,
        sync=options.sync,
        staleness=options.staleness,
        local_proxy=getattr(options, "local_proxy", False),
    )


def least_loaded_assignment(sizes: Sequence[int], bins: int) -> tuple[list[int], list[int]]:
    """Longest-processing-time greedy: take items largest first (ties in the given order), put each
    in the bin with the least load so far (ties -> lowest index). Returns (bin of each item, loads).

    Sorting first keeps the largest load within 4/3 of the best possible; placing items in the given
    order, as AutoDist did, can leave one bin with the last big item on top of an even load.
    """
    loads = [0] * bins
    assignment = [0] * len(sizes)
    for item in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        target = min(range(bins), key=lambda b: loads[b])
        assignment[item] = target
        loads[target] += sizes[item]
    return assignment, loads


def require_ps(builder: str, spec: ClusterSpec) -> None:
    """UserError unless the spec has a PS process for a builder that needs one."""
    if spec.num_ps < 1:
        raise UserError(
            f"strategy {builder} puts variables on parameter servers, but the cluster spec has no PS process; "
            "use --strategy AllReduce, or add `ps: 1` to a node of the spec"
        )


class PS(ChunkingPSBuilder):
    """Every variable on PS task 0.

    Options: `sync` (default true; false = asynchronous updates), `staleness` (default 0; steps a worker
    may run ahead, needs sync), `local_proxy` (default false; each worker reads a local copy refreshed
    every step instead of fetching from the PS at every read), `chunk_bytes` (default 1048576; large dense
    variables in chunks on their PS, see ChunkingPSBuilder). Choose it for small models or as a
    simple baseline: one PS holds all state, so it is the easiest plan to reason about, and the first
    to become a bottleneck as the model or the worker count grows. Needs at least one PS process in
    the spec.
    """

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[PSSync | Decision]:
        require_ps(type(self).__name__, spec)
        return [self.chunked(v, ps_sync(self.options, 0)) for v in variables]


class PSLoadBalancing(ChunkingPSBuilder):
    """Variables spread over all PS tasks so each holds about the same number of bytes.

    Largest variables are placed first, each on the PS with the least bytes so far (ties -> lowest task
    index). AutoDist placed variables in creation order without sorting; sorting first gives a more even
    split. Options: `sync` (default true), `staleness` (default 0, needs sync), `local_proxy` (default
    false; workers read local copies), `chunk_bytes` (default 1048576; large dense variables in chunks on
    their PS, see ChunkingPSBuilder). Choose it when the spec has several PS processes and the model
    has many variables of mixed sizes; with one PS it equals PS. When one variable dominates the
    bytes, PartitionedPS spreads it too.
    """

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[PSSync | Decision]:
        require_ps(type(self).__name__, spec)
        tasks, _ = least_loaded_assignment([v.nbytes for v in variables], spec.num_ps)
        return [self.chunked(v, ps_sync(self.options, t)) for v, t in zip(variables, tasks, strict=True)]
