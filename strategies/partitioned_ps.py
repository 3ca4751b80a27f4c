"""Partitioned parameter-server builders: large variables are split on axis 0 into shards, and the
shards of all variables are spread over the PS processes by bytes."""

from __future__ import annotations

from pydantic import Field

from adrun.graph_item import VariableInfo
from adrun.spec import ClusterSpec

from .base import Decision, PerVariableBuilder, axis0_rows
from .document import Partition, Synchronizer, shard_sizes
from .ps import PSOptions, least_loaded_assignment, ps_sync, require_ps


class PartitionedPSOptions(PSOptions):
    max_shards: int | None = Field(
        default=None, ge=1, description="most shards per variable; unset = the number of PS processes"
    )


class PartitionedPS(PerVariableBuilder):
    """Variables split on axis 0 into one shard per PS process; all shards balanced by bytes.

    A variable is split into k = min(max_shards, rows) shards, rows = its size on axis 0 (TF's slicing:
    the first rows % k shards get one extra row). Variables with fewer than 2 rows stay whole, as do
    variables whose size on axis 0 is unknown and variables the runtime cannot split (created with
    tf.Variable or a Keras layer, read inside tf.while_loop, or of a shape not fully known); those
    get a `note` in the plan saying why. Then every shard and every whole
    variable is placed largest first on the PS with the fewest bytes so far (ties -> lowest task).

    AutoDist took the smallest divisor of the row count (2 for any even size whatever the PS count,
    and n shards for a prime n, e.g. 10007 shards of one row). Here the count follows the number of
    PS processes, because the point of splitting is that every PS serves a part of each large
    variable; uneven shards cost nothing, so divisibility does not matter.

    Options: `sync` (default true), `staleness` (default 0, needs sync), `local_proxy` (default false),
    `max_shards` (default: the number of PS processes; set it higher for finer balancing — several
    shards of one variable may then share a PS). Choose it when one or a few variables (embeddings,
    large dense layers) dominate the bytes, so that placing whole variables cannot balance the PS
    processes, or when one PS's network link is the bottleneck. With one PS nothing is split unless
    `max_shards` says so.
    """

    Options = PartitionedPSOptions
    options: PartitionedPSOptions

    def default_max_shards(self, spec: ClusterSpec) -> int:
        return spec.num_ps

    def choose_shards(self, rows: int, max_shards: int) -> tuple[int, str | None]:
        """Shard count for a variable of `rows` rows (>= 2), with a note if the choice had to differ
        from what the builder is for. 1 = keep whole."""
        return min(max_shards, rows), None

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[Decision]:
        require_ps(type(self).__name__, spec)
        max_shards = self.options.max_shards or self.default_max_shards(spec)
        counts: list[int] = []
        notes: list[str | None] = []
        pieces: list[int] = []  # bytes of every shard (or whole variable), in variable then shard order
        for var in variables:
            count, note = self._shard_count(var, max_shards)
            counts.append(count)
            notes.append(note)
            if count == 1:
                pieces.append(var.nbytes)
            else:
                row_bytes = var.nbytes // var.shape[0]
                pieces += [rows * row_bytes for rows in shard_sizes(var.shape[0], count)]
        tasks, _ = least_loaded_assignment(pieces, spec.num_ps)
        decisions, start = [], 0
        for count, note in zip(counts, notes, strict=True):
            syncs: list[Synchronizer] = [ps_sync(self.options, t) for t in tasks[start:start + count]]
            start += count
            if count == 1:
                decisions.append(Decision(sync=syncs[0], note=note))
            else:
                decisions.append(Decision(partition=Partition(axis=0, shards=syncs), note=note))
        return decisions

    def _shard_count(self, var: VariableInfo, max_shards: int) -> tuple[int, str | None]:
        rows, whole = axis0_rows(var)
        if rows == 1:
            return 1, whole if max_shards >= 2 else None  # asked for one shard: nothing to explain
        count, note = self.choose_shards(rows, max_shards)
        return (count, note) if count >= 2 else (1, None)


class UnevenPartitionedPSOptions(PartitionedPSOptions):
    max_shards: int | None = Field(
        default=None, ge=1, description="most shards per variable; unset = the number of PS processes, at least 3"
    )


class UnevenPartitionedPS(PartitionedPS):
    """PartitionedPS with shard counts chosen so that shards differ in size (rows % k != 0).

    For a variable of `rows` rows it takes the largest k in [2, min(max_shards, rows)] that does not
    divide rows; if every k in that range divides rows (e.g. 6 rows, max 3), it falls back to the
    largest k and the plan's `note` says the shards are even. Placement and blocked variables are as
    in PartitionedPS.

    Options: `sync` (default true), `staleness` (default 0, needs sync), `local_proxy` (default false),
    `max_shards` (default: the number of PS processes, but at least 3 — with 2 the only count is 2,
    which is even for every even size; with 1 PS several shards share it).

    Choose it to exercise and check uneven slicing (the first rows % k shards one row larger) in the
    runtime and in checkpoints; for speed, PartitionedPS is the better choice. AutoDist took the
    smallest non-divisor regardless of the PS count.
    """

    Options = UnevenPartitionedPSOptions
    options: UnevenPartitionedPSOptions

    def default_max_shards(self, spec: ClusterSpec) -> int:
        return max(spec.num_ps, 3)

    def choose_shards(self, rows: int, max_shards: int) -> tuple[int, str | None]:
        top = min(max_shards, rows)
        uneven = next((k for k in range(top, 1, -1) if rows % k), None)
        if uneven is not None:
            return uneven, None
        if top < 2:
            return 1, None
        return top, f"shards even: every count from 2 to {top} divides {rows}"
