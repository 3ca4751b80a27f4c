"""Partitioned all-reduce builders: variables split into shards, each shard all-reduced on its own."""

from __future__ import annotations

import random

from pydantic import Field

from adrun.graph_item import VariableInfo
from adrun.spec import ClusterSpec

from .allreduce import AllReduceOptions, AxisChoice, plan_allreduce
from .base import BuilderOptions, Decision, PerVariableBuilder, axis0_rows, blocker_note


class PartitionedAROptions(AllReduceOptions):
    shards: int = Field(default=2, ge=2, description="shards per variable on axis 0 (fewer if it has fewer rows)")


class PartitionedAR(PerVariableBuilder):
    """All-reduce with every variable split on axis 0 into `shards` parts, each reduced separately.

    A variable with rows >= 2 on axis 0 becomes min(shards, rows) shards (TF's slicing: the first
    rows % k shards get one extra row); variables with fewer rows stay whole, and so do variables the
    runtime cannot split (created with tf.Variable or a Keras layer, read inside tf.while_loop, or of
    a shape not fully known) and those whose size on axis 0 is unknown, with a `note` in the plan.
    AutoDist did not check the runtime's limits and failed at run time. Groups are numbered over the
    flattened list of shards: group = running shard index // chunk_size.

    Options: `chunk_size` (default 128; shards per group), `shards` (default 2), `compressor` (default
    none; fp16, fp16-ef, powersgd; dense gradients only), `powersgd_rank` (default 1). Choose it
    when a few large dense variables dominate: smaller pieces let the collectives of one variable
    overlap with the rest of the step and with each other. For ordinary models AllReduce is simpler
    and as fast.
    """

    Options = PartitionedAROptions
    options: PartitionedAROptions

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[Decision]:
        o = self.options
        return plan_allreduce(variables, o.chunk_size, o.compressor, o.powersgd_rank, self._choose)

    def _choose(self, var: VariableInfo) -> AxisChoice:
        rows, whole = axis0_rows(var)
        return (None, 1, whole) if rows == 1 else (0, min(self.options.shards, rows), None)


class RandomAxisPartitionAROptions(BuilderOptions):
    chunk_size: int = Field(default=128, ge=1, description="shards per all-reduce group, in creation order")
    seed: int = Field(default=0, description="seed of the axis draws; the same seed gives the same plan")
    shards: int = Field(default=2, ge=2, description="shards per variable on the drawn axis (fewer if it is shorter)")


class RandomAxisPartitionAR(PerVariableBuilder):
    """PartitionedAR on a randomly drawn axis per variable, reproducibly.

    For each variable, in creation order, the axis is drawn from the axes of size >= 2 with
    `random.Random(seed)`, so every worker and every rebuild with the same seed gets the same plan
    (AutoDist drew unseeded). Sparse gradients are always split on axis 0 (the only axis a sparse
    update can be sliced on); a draw is made only when there are two or more candidate axes (also for
a variable the runtime cannot split, so the other variables' axes do not depend on that). The
    variable becomes min(shards, size of that axis) shards; variables without an axis of size >= 2
    stay whole (noted in the plan when an axis has an unknown size), and so do variables the runtime
    cannot split (noted). No compressor.

    Options: `chunk_size` (default 128; shards per group), `seed` (default 0), `shards` (default 2).
    Choose it to test that partitioning on any axis gives the same training result as no
    partitioning; it is not meant to be faster than PartitionedAR.
    """

    Options = RandomAxisPartitionAROptions
    options: RandomAxisPartitionAROptions

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[Decision]:
        rng = random.Random(self.options.seed)

        def choose(var: VariableInfo) -> AxisChoice:
            axes = [axis for axis, size in enumerate(var.shape) if size >= 2]
            if var.grad == "sparse":
                axes = [axis for axis in axes if axis == 0]
            if not axes:
                unknown = [axis for axis, size in enumerate(var.shape) if size == -1]
                return None, 1, f"kept whole: the size of axis {unknown[0]} is unknown" if unknown else None
            # Draw before looking at the blocker, so that the draws of the other variables do not
            # depend on it (it is not part of the fingerprint).
            axis = axes[0] if len(axes) == 1 else rng.choice(axes)
            if var.partition_blocker is not None:
                return None, 1, blocker_note(var)
            return axis, min(self.options.shards, var.shape[axis]), None

        return plan_allreduce(variables, self.options.chunk_size, choose=choose)
