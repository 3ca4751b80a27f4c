"""Parameter-server builders: each variable lives on one PS process, which aggregates its gradients."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, model_validator

from adrun.errors import UserError
from adrun.graph_item import VariableInfo
from adrun.spec import ClusterSpec

from .base import BuilderOptions, PerVariableBuilder
from .document import PSSync, check_staleness_needs_sync


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


class PS(PerVariableBuilder):
    """Every variable on PS task 0.

    Options: `sync` (default true; false = asynchronous updates), `staleness` (default 0; steps a worker
    may run ahead, needs sync), `local_proxy` (default false; each worker reads a local copy refreshed
    every step instead of fetching from the PS at every read). Choose it for small models or as a
    simple baseline: one PS holds all state, so it is the easiest plan to reason about, and the first
    to become a bottleneck as the model or the worker count grows. Needs at least one PS process in
    the spec.
    """

    Options = PSOptions
    options: PSOptions

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[PSSync]:
        require_ps(type(self).__name__, spec)
        return [ps_sync(self.options, 0) for _ in variables]


class PSLoadBalancing(PerVariableBuilder):
    """Variables spread over all PS tasks so each holds about the same number of bytes.

    Largest variables are placed first, each on the PS with the least bytes so far (ties -> lowest task
    index). AutoDist placed variables in creation order without sorting; sorting first gives a more even
    split. Options: `sync` (default true), `staleness` (default 0, needs sync), `local_proxy` (default
    false; workers read local copies). Choose it when the spec has several PS processes and the model
    has many variables of mixed sizes; with one PS it equals PS. When one variable dominates the
    bytes, PartitionedPS spreads it too.
    """

    Options = PSOptions
    options: PSOptions

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[PSSync]:
        require_ps(type(self).__name__, spec)
        tasks, _ = least_loaded_assignment([v.nbytes for v in variables], spec.num_ps)
        return [ps_sync(self.options, t) for t in tasks]
