"""Strategy document v1: how each variable's gradients are synchronized (YAML).

The planner writes it, a user may read or edit it, and every worker loads it to rewrite its graph.
It is tied to one graph (`fingerprint`) and one cluster size (`num_workers`, `num_ps`);
`check_matches` refuses a document used with a different graph or spec.

Each variable has either one synchronizer (`sync`) or a `partition`: split along one axis into
shards, TF `fixed_size_partitioner` style (`shard_sizes`), each shard with its own synchronizer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from math import prod
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from adrun.errors import UserError
from adrun.graph_item import DType, GradKind, GraphItem, KerasFlavour, ScriptKind, Shape
from adrun.model_io import Loc, Problems, Version1, dump_yaml, load_yaml_model
from adrun.spec import MAX_GPUS, MAX_REPLICAS, ClusterSpec

# About 150 bytes per variable: a plan for 100,000 variables.
MAX_STRATEGY_BYTES = 16 * 2**20


class PSSync(BaseModel):
    """Gradients are sent to one parameter server, which holds the variable and applies updates."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ps"] = "ps"
    ps_task: StrictInt = Field(ge=0)  # index of the PS process that holds the variable
    sync: StrictBool = True  # false = every worker's update is applied on arrival (asynchronous)
    staleness: StrictInt = Field(default=0, ge=0)  # bounded staleness in steps (needs sync: true)
    local_proxy: StrictBool = False  # each worker reads a cached local copy
    pool_bags: StrictBool = True  # lookups of this table pooled over their bags come back as per-example sums (runtime/kernels/pooled_bags.py)

    @model_validator(mode="after")
    def _staleness_needs_sync(self) -> PSSync:
        check_staleness_needs_sync(self.staleness, self.sync, "`sync: true`")
        return self


def check_staleness_needs_sync(staleness: int, sync: bool, sync_true: str) -> None:
    """The rule between a PS synchronizer's `staleness` and `sync`, for this document and for the
    builders' options (strategies/ps.py) alike: a bound needs synchronous updates. `sync_true` is
    how the reader writes it: `sync: true` in YAML, `sync=true` on the command line."""
    if staleness > 0 and not sync:
        raise Problems([(("staleness",), f"a bound of {staleness} step(s) needs {sync_true}; "
                         "asynchronous updates have no bound")])


Compressor = Literal["none", "fp16", "fp16-ef", "powersgd"]


class AllReduceSync(BaseModel):
    """Every worker keeps a replica; gradients are averaged with a collective all-reduce.

    `compressor` shrinks dense gradients before the reduction: `fp16` casts to half precision and
    back, `fp16-ef` adds error feedback (the rounding error is kept and added to the next step's
    gradient), `powersgd` sends a rank-`powersgd_rank` approximation. Sparse gradients are
    all-gathered and never compressed, so a sparse variable must use `none`. `powersgd_rank` is
    ignored by every other compressor.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["allreduce"] = "allreduce"
    group: StrictInt = Field(ge=0)  # variables of one group are reduced together in one collective
    compressor: Compressor = "none"
    powersgd_rank: StrictInt = Field(default=1, ge=1)  # only used by `compressor: powersgd`


Synchronizer = Annotated[PSSync | AllReduceSync, Field(discriminator="kind")]

# Why a TF2 plan cannot mix parameter servers and all-reduce (measured: docs/tf2-plans.md).
TF2_NO_MIXED = ("a TF2 worker reaches its PS tasks as remote devices, and TensorFlow 2.21 cannot run collective ops "
                "in the same process (\"Cannot enable remote execution as well as collective ops at the moment\"; "
                "enabled late, a tf.function reading a PS variable fails: \"resource inputs residing on remote "
                "devices ... not supported\"). Put every variable on PS tasks or all-reduce every variable")
TF2_NO_PARTITIONED_PS = ("a variable split over PS tasks on an axis other than 0 is not built in TF2 mode "
                         "(TensorFlow's ShardedVariable, which stands in for it, splits rows only); split it on "
                         "axis 0 or keep it whole on one PS")
TF2_NO_SPLIT_TF_KERAS = ("TF2 mode splits a variable over PS tasks for Keras 3 only, and the script trains with "
                         "tf_keras, whose layers list a split variable's shards as their weights, so its saved models "
                         "and checkpoints would not hold the plain model's variables. Keep it whole on one PS "
                         "(PS, PSLoadBalancing), or train with Keras 3")
TF2_NO_PROXY = ("local_proxy is not built in TF2 mode: a TF2 worker reads its PS variables inside its own "
                "tf.function; use local_proxy: false")


def tf2_refusals(variables: Sequence[VariablePlan], replica_devices: Sequence[Sequence[str]] | None = None,
                 keras: KerasFlavour | None = None) -> list[tuple[Loc, str]]:
    """(location in the Strategy, reason) for each part of a plan TF2 mode cannot run; empty when it
    can. THE predicate of what TF2 mode runs (the document's check and Auto's candidates use it):
    - every all-reduce option (compressors, grouping, PartitionedAR: adrun/runtime/tf2/reduction.py);
    - or every variable on PS tasks, whole or split on axis 0 (adrun/runtime/tf2/ps_*.py), all with
      one `sync` and `staleness` setting (one protocol per step) and no `local_proxy`; split only
      for a Keras 3 script (`keras` is the captured GraphItem.keras; None, unknown, is let through
      and the run refuses tf_keras at import);
    - not both kinds in one plan, one replica per worker."""
    findings: list[tuple[Loc, str]] = []
    located = [(("variables", i, *loc), var, sync) for i, var in enumerate(variables)
               for loc, sync in var.located_synchronizers()]
    ps = [(loc, var, sync) for loc, var, sync in located if isinstance(sync, PSSync)]
    if ps and len(ps) < len(located):
        first = next(var.name for _, var, sync in located if not isinstance(sync, PSSync))
        findings.append(((), f"a plan mixing parameter servers ('{ps[0][1].name}') and all-reduce ('{first}'): "
                         f"{TF2_NO_MIXED}"))
    settings = {(sync.sync, sync.staleness) for _, _, sync in ps}
    split = [(i, var.name) for i, var in enumerate(variables)
             if var.partition is not None and any(isinstance(s, PSSync) for s in var.partition.shards)]
    if keras == "tf_keras" and split:  # one finding, at the first: the reason is the script's, not a variable's
        listed = ", ".join(f"'{name}'" for _, name in split[:3]) + (f" and {len(split) - 3} more" if len(split) > 3 else "")
        findings.append((("variables", split[0][0], "partition"), f"{listed} split over PS tasks: {TF2_NO_SPLIT_TF_KERAS}"))
    for loc, var, sync in ps:
        if var.partition is not None and var.partition.axis != 0:
            findings.append(((*loc, "kind"), f"'{var.name}': {TF2_NO_PARTITIONED_PS}"))
        if sync.local_proxy:
            findings.append(((*loc, "local_proxy"), f"'{var.name}': {TF2_NO_PROXY}"))
    if len(settings) > 1:
        listed = ", ".join(f"sync: {str(a).lower()}, staleness: {b}" for a, b in sorted(settings))
        findings.append(((), f"the PS variables differ in sync/staleness ({listed}); TF2 mode runs one protocol "
                         "per step: give every PS variable the same setting"))
    for i, devices in enumerate(replica_devices or []):
        if len(devices) > 1:
            findings.append((("replica_devices", i), f"{len(devices)} in-graph replicas: a TF2 script runs one "
                             "replica per worker process (give each GPU its own worker)"))
    return findings


def low_rank_applies(shape: Sequence[int], rank: int) -> bool:
    """Whether PowerSGD sends rank-`rank` factors of a gradient of this shape: only for matrices
    (axis 0 against the rest) with both sides larger than the rank and factors smaller than the
    matrix; other gradients are reduced uncompressed."""
    if len(shape) < 2 or min(shape) < 1:
        return False
    n, m = shape[0], prod(shape) // shape[0]
    return rank < min(n, m) and (n + m) * rank < n * m


def shard_sizes(n: int, k: int) -> list[int]:
    """Rows of each of `k` shards of a dimension of size `n`, as TF's `fixed_size_partitioner` slices:
    the first `n % k` shards get one extra row. `shard_sizes(10, 3) == [4, 3, 3]`."""
    if k < 1 or n < k:
        raise ValueError(f"cannot split a dimension of {n} into {k} shard(s) (need 1 <= shards <= size)")
    base, extra = divmod(n, k)
    return [base + 1 if i < extra else base for i in range(k)]


class Partition(BaseModel):
    """The variable is split along `axis` into `len(shards)` slices (TF's uneven slicing, see
    `shard_sizes`); shard i is synchronized by `shards[i]`."""

    model_config = ConfigDict(extra="forbid")

    axis: StrictInt = Field(ge=0)
    shards: list[Synchronizer] = Field(min_length=2)


class VariablePlan(BaseModel):
    """The plan for one variable; name, shape and dtype repeat the GraphItem so the file is readable.

    Exactly one of `sync` (the whole variable) or `partition` (one synchronizer per shard) is set.
    `note` is a remark from the builder when it could not do what was asked for this variable
    (e.g. "kept whole: read inside tf.while_loop"); the runtime ignores it.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    shape: Shape
    dtype: DType
    grad: GradKind
    sync: Synchronizer | None = None
    partition: Partition | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _check_plan(self) -> VariablePlan:
        if (self.sync is None) == (self.partition is None):
            which = "both sync and partition" if self.sync is not None else "neither sync nor partition"
            raise Problems([((), f"variable '{self.name}' has {which}; give exactly one")])
        findings: list[tuple[Loc, str]] = []
        if self.partition is not None:
            findings += self._partition_findings(self.partition)
        if self.grad == "sparse":
            for loc, sync in self.located_synchronizers():
                if isinstance(sync, AllReduceSync) and sync.compressor != "none":
                    findings.append(
                        ((*loc, "compressor"), f"compressor '{sync.compressor}' works on dense gradients only; "
                         f"'{self.name}' has sparse gradients, which are all-gathered uncompressed: use none")
                    )
        if findings:
            raise Problems(findings)
        return self

    def _partition_findings(self, partition: Partition) -> list[tuple[Loc, str]]:
        rank, axis = len(self.shape), partition.axis
        if axis >= rank:
            return [(("partition", "axis"), f"axis {axis} does not exist: '{self.name}' has shape {self.shape} "
                     f"(rank {rank})")]
        findings: list[tuple[Loc, str]] = []
        if self.grad == "sparse" and axis != 0:
            findings.append((("partition", "axis"), f"'{self.name}' has sparse gradients, which can only be "
                             f"partitioned on axis 0, not {axis}"))
        size, count = self.shape[axis], len(partition.shards)
        if -1 in self.shape:  # TF cuts only a variable whose whole shape is known
            unknown = [i for i, d in enumerate(self.shape) if d == -1]
            findings.append((("partition", "axis"), f"axis {unknown[0]} of '{self.name}' (shape {self.shape}) has "
                             "a size unknown when the graph was built; it cannot be partitioned"))
        elif count > size:
            findings.append((("partition", "shards"), f"{count} shards, but axis {axis} of '{self.name}' has "
                             f"only {size} entries (shape {self.shape})"))
        return findings

    def synchronizers(self) -> list[PSSync | AllReduceSync]:
        """One synchronizer for a whole variable, or one per shard in shard order."""
        if self.partition is not None:
            return list(self.partition.shards)
        assert self.sync is not None
        return [self.sync]

    def located_synchronizers(self) -> list[tuple[Loc, PSSync | AllReduceSync]]:
        """`synchronizers()` with each one's field path inside this plan (`sync`, `partition.shards[2]`)."""
        if self.partition is not None:
            return [(("partition", "shards", i), s) for i, s in enumerate(self.partition.shards)]
        assert self.sync is not None
        return [(("sync",), self.sync)]

    def shard_names(self) -> list[str]:
        """TF's names of the shards in a worker's graph (`emb/part_0`, ...): what a script listing its
        variables sees. One entry, the name, when not partitioned."""
        if self.partition is None:
            return [self.name]
        return [f"{self.name}/part_{i}" for i in range(len(self.partition.shards))]

    def shard_shapes(self) -> list[list[int]]:
        """The shape of each shard (one entry, the whole shape, when not partitioned)."""
        if self.partition is None:
            return [list(self.shape)]
        axis = self.partition.axis
        return [
            [rows if i == axis else d for i, d in enumerate(self.shape)]
            for rows in shard_sizes(self.shape[axis], len(self.partition.shards))
        ]


_DEVICE = re.compile(r"(CPU|GPU):(0|[1-9][0-9]*)")


def _check_device(name: str) -> str:
    """`CPU:<n>` or `GPU:<n>`, n written as the runtime writes it (so `CPU:01` cannot pass as a second
    device besides `CPU:1`) and below the spec's ceiling: a worker makes CPU devices 0..n for
    `CPU:n`, and a node has at most MAX_GPUS GPUs."""
    match = _DEVICE.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a local device name; use CPU:<n> or GPU:<n>")
    kind, index = match.group(1), int(match.group(2))
    ceiling = MAX_REPLICAS if kind == "CPU" else MAX_GPUS
    if index >= ceiling:
        raise ValueError(f"'{name}' is beyond the last {kind} a worker may use ({kind}:{ceiling - 1})")
    return name


ReplicaDevice = Annotated[str, AfterValidator(_check_device)]


class Strategy(BaseModel):
    """A whole plan: which builder made it, for which graph and cluster size, every variable's sync,
    and the devices of each worker's in-graph replicas.

    `replica_devices[i]` lists worker i's local devices (`GPU:0`, `CPU:1`, ...), one replica of the
    training step on each; unset means one replica per worker on its default device.
    """

    model_config = ConfigDict(extra="forbid")

    version: Version1
    kind: ScriptKind = "graph"  # the script's runtime (GraphItem.kind): what every task starts at import
    keras: KerasFlavour | None = None  # a TF2 script's Keras (GraphItem.keras): what its plan may split
    builder: str = Field(min_length=1)
    options: dict[str, bool | int | float | str] = {}
    fingerprint: str = Field(min_length=1)
    num_workers: StrictInt = Field(ge=1)
    num_ps: StrictInt = Field(ge=0)
    variables: list[VariablePlan]
    replica_devices: list[list[ReplicaDevice]] | None = None
    # why this plan, in one line, from the builder that chose it (Auto: its predicted step time
    # beside the next builders'); shown with the plan, kept when the plan is remembered
    reason: str = ""

    @model_validator(mode="after")
    def _check_replica_devices(self) -> Strategy:
        if self.replica_devices is None:
            return self
        findings: list[tuple[Loc, str]] = []
        if len(self.replica_devices) != self.num_workers:
            findings.append((("replica_devices",), f"{len(self.replica_devices)} entries for {self.num_workers} "
                             "worker(s); give one list of devices per worker"))
        for i, devices in enumerate(self.replica_devices):
            loc: Loc = ("replica_devices", i)
            if not devices:
                findings.append((loc, "no device; a worker needs at least one (e.g. [CPU:0])"))
            elif len(set(devices)) != len(devices):
                findings.append((loc, f"a device is listed twice in {devices}"))
            elif len({d.split(":")[0] for d in devices}) > 1:
                findings.append((loc, f"{devices} mixes CPU and GPU devices; a worker's replicas use one kind"))
        if findings:
            raise Problems(findings)
        return self

    @model_validator(mode="after")
    def _check_tf2_runnable(self) -> Strategy:
        """A TF2 script is synchronized by collectives at its optimizer's apply (adrun/runtime/tf2/):
        refuse, when planned, what that cannot run, naming the variable and why."""
        if self.kind != "tf2":
            return self
        findings = tf2_refusals(self.variables, self.replica_devices, self.keras)
        if findings:
            raise Problems(findings)
        return self

    def replicas_of(self, worker: int) -> list[str]:
        """Worker `worker`'s replica devices; [] when the document leaves them unset (one replica)."""
        return list(self.replica_devices[worker]) if self.replica_devices is not None else []

    @model_validator(mode="after")
    def _check_variables(self) -> Strategy:
        findings: list[tuple[Loc, str]] = []
        first_seen: dict[str, int] = {}
        for i, var in enumerate(self.variables):
            if var.name in first_seen:
                findings.append(
                    (("variables", i, "name"), f"duplicate variable '{var.name}' (also variables[{first_seen[var.name]}])")
                )
            first_seen.setdefault(var.name, i)
            for loc, sync in var.located_synchronizers():
                if isinstance(sync, PSSync):
                    findings += self._ps_task_findings(("variables", i, *loc), sync)
        if findings:
            raise Problems(findings)
        return self

    def _ps_task_findings(self, loc: Loc, sync: PSSync) -> list[tuple[Loc, str]]:
        if self.num_ps == 0:
            return [(loc, "a 'ps' synchronizer needs a PS process, but num_ps is 0")]
        if sync.ps_task >= self.num_ps:
            return [
                ((*loc, "ps_task"),
                 f"PS task {sync.ps_task} does not exist; num_ps is {self.num_ps} (tasks 0..{self.num_ps - 1})")
            ]
        return []

    @property
    def uses_ps(self) -> bool:
        """True when any variable or shard is held by a parameter server."""
        return any(isinstance(s, PSSync) for v in self.variables for s in v.synchronizers())

    @property
    def uses_all_reduce(self) -> bool:
        """True when any variable or shard is all-reduced among the workers (they then serve each
        other's chunks until the last one finished: adrun/runtime/finish.py)."""
        return any(isinstance(s, AllReduceSync) for v in self.variables for s in v.synchronizers())


def strategy_to_yaml(strategy: Strategy) -> str:
    """The document as readable YAML, fields in schema order, shapes and synchronizers on one line."""
    header = (
        f"# adrun strategy, made by {strategy.builder}. The fingerprint ties it to one graph:\n"
        "# edit synchronizers freely, but keep names, shapes and dtypes as captured.\n"
    )
    data = strategy.model_dump(mode="json")
    if data["kind"] == "graph":  # the default: graph plans read as they did before kinds existed
        del data["kind"]
    if data["keras"] is None:  # graph plans, and TF2 plans made before the flavour was recorded
        del data["keras"]
    if not data["reason"]:  # a builder that gives none: documents read as before reasons existed
        del data["reason"]
    for var in data["variables"]:
        _drop_noise(var)
    return header + dump_yaml(data)


def _drop_noise(var: dict[str, Any]) -> None:
    """Leave out of the YAML what only repeats a default nobody reads: the unset one of sync and
    partition, an unset note, and `powersgd_rank: 1` on a synchronizer that is not powersgd."""
    for key in ("sync", "partition", "note"):
        if var[key] is None:
            del var[key]
    syncs = [var["sync"]] if "sync" in var else var["partition"]["shards"]
    for sync in syncs:
        if sync["kind"] == "allreduce" and sync["compressor"] != "powersgd" and sync["powersgd_rank"] == 1:
            del sync["powersgd_rank"]


def dump_strategy(strategy: Strategy, path: str | Path) -> None:
    Path(path).write_text(strategy_to_yaml(strategy), encoding="utf-8")


def load_strategy(path: str | Path) -> Strategy:
    """Read and validate a strategy document; every problem is reported in one `UserError`."""
    return load_yaml_model(path, Strategy, MAX_STRATEGY_BYTES)


def check_matches(strategy: Strategy, graph_item: GraphItem, spec: ClusterSpec, source: str = "strategy") -> None:
    """Refuse a plan made for another graph or another cluster size, saying what differs.

    `source` names the plan in the message (usually its file path).
    """
    problems = []
    if strategy.fingerprint != graph_item.fingerprint:
        problems.append(
            f"planned for a different graph (fingerprint {strategy.fingerprint}, this graph "
            f"{graph_item.fingerprint}): {describe_variable_changes(strategy, graph_item)}"
        )
    if (strategy.num_workers, strategy.num_ps) != (spec.num_workers, spec.num_ps):
        problems.append(
            f"planned for {strategy.num_workers} worker(s) and {strategy.num_ps} PS, but the cluster spec "
            f"has {spec.num_workers} worker(s) and {spec.num_ps} PS"
        )
    if problems:
        advice = f"plan again (--strategy {strategy.builder}) for this script and cluster"
        raise UserError("\n".join(f"{source}: {p}" for p in problems) + f"\n{source}: {advice}")


def describe_variable_changes(strategy: Strategy, graph_item: GraphItem) -> str:
    """Which planned variables are missing, new or changed in `graph_item`, in one sentence."""
    planned = {v.name: v for v in strategy.variables}
    found = {v.name: v for v in graph_item.trainable_with_grads()}
    parts = []
    missing = [name for name in planned if name not in found]
    extra = [name for name in found if name not in planned]
    if missing:
        parts.append("not in the graph (or no longer trained): " + ", ".join(missing))
    if extra:
        parts.append("trained but not planned: " + ", ".join(extra))
    for name in (n for n in planned if n in found):
        was, now = planned[name], found[name]
        changes = [
            f"{field} {old} -> {new}"
            for field, old, new in (
                ("shape", was.shape, now.shape),
                ("dtype", was.dtype, now.dtype),
                ("grad", was.grad, now.grad),
            )
            if old != new
        ]
        if changes:
            parts.append(f"'{name}' changed: {', '.join(changes)}")
    return "; ".join(parts) or (
        "the planned variables are unchanged; variables the plan does not cover "
        "(non-trainable, or without gradient) differ"
    )
