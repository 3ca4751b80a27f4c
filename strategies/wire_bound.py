"""The fewest bytes one training step of a plan must move between tasks, and between hosts.

A lower bound per strategy family, computed from the plan alone (no TensorFlow): what each
synchronizer cannot avoid sending, given the variables' sizes and, for sparse variables, how many
distinct rows each worker touches in a step. Measured traffic is judged against it
(docs/performance.md, "Bytes on the wire"). Per variable, or per shard of a partitioned one, with N
workers, M its bytes, R the bytes of one row, I = 8 bytes per row id (adrun sends ids as int64) and
u_w the distinct rows worker w touches in the step:

- PS (whole variables, or shards spread over PSs; synchronous, bounded staleness or asynchronous
  alike): each worker pulls what it reads and pushes one gradient. Dense: M each way. Sparse: its
  u_w distinct ids go to the PS (u_w·I), the u_w rows come back (u_w·R), and one summed gradient
  row per distinct id goes to the PS (u_w·R); the PS already has the ids, so they cross once.
  With `local_proxy` a worker pulls its copy of the whole variable (M) every step instead.
- PS, a table whose lookups are pooled over their bags (`pooled`: capture's
  `VariableInfo.pooled`, every piece on a PS with `pool_bags` and no local proxy, N > 1 and one
  in-graph replica per worker: `pooled_bags`;
  docs/performance.md, "Pooling bags on the PS"): with B the examples of a step and R = dim ×
  itemsize, each shard returns worker w its per-example partial sums (B·R) every step, not the
  rows (zeros when it holds none of the worker's ids: the runtime's segment sum runs anyway); the worker sends the shard its distinct ids (u_w·I) and, per
  occurrence of one of them, its index and example (two int32, O = 8 bytes; the occurrences of
  the step's ids, in proportion to the shard's share of the worker's distinct rows, at least u_w,
  and u_w when the graph does not say how many); backward it sends d_sum (B·R) once to each PS
  task holding a shard of the table, which forms the gradient rows itself.
- All-reduce, dense (ring): each worker sends 2(N−1)/N of the buffer to the next worker in task
  order (rounded up to whole bytes); the buffer is M, M/2 with fp16 compressors, and the
  (n + m)·rank factors of an n×m matrix with PowerSGD when the low-rank form is smaller.
- All-reduce, sparse (ring all-gather): each worker passes on every worker's distinct rows and ids
  except those of the next worker, Σ_{v ≠ w+1} u_v·(R + I): traffic grows with N.

A transfer between two tasks on one host never reaches the network: `wire_bound` counts what
crosses between hosts per host (sent, received) and reports same-host bytes separately, e.g. the
pulls and pushes between a worker and a PS on its own host. Synchronization tokens carry no payload
and count 0.

The bound is payload only: what any implementation of the family sends whatever its transport. A
measured step also carries adrun's and TF's framing, none of it owed to the plan: each collective
message's gRPC request and response framing (about 300 B a message), the padding of a sparse
all-gather to the longest worker's rows (TF's gathers take one shape from every worker), the
apply's check (8 B, and 8 B per sparse variable), and Ethernet/IP/TCP headers (66 B a segment of
at most 1,448 B on the benchmark's shaped links) with the receiver's acknowledgements. The TF2
sparse Keras plan with allow_lossy on two workers (317,600 B a step per host) sent 1.018× its
bound in TCP payload over a loopback of MTU 1500, and 1.075× in interface bytes on the
benchmark's commodity link (docs/performance.md, "Framing a small plan pays").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod

from adrun.graph_item import PooledBags, dtype_itemsize
from adrun.placement import TaskId, ps, task_hosts, worker
from adrun.spec import ClusterSpec

from .document import AllReduceSync, PSSync, Strategy, VariablePlan, low_rank_applies

INDEX_BYTES = 8
# a pooled lookup's id occurrence: its index among its shard's distinct ids and its example, int32 each
OCCURRENCE_BYTES = 8


@dataclass(frozen=True)
class Transfer:
    """Bytes one step moves from one task to another (`w0` to `ps1`), and why."""

    source: TaskId
    destination: TaskId
    nbytes: int
    what: str


@dataclass(frozen=True)
class HostTraffic:
    sent: int
    received: int


@dataclass(frozen=True)
class WireBound:
    """Per host, the bytes a step must send to and receive from other hosts; and the bytes that
    stay between tasks of one host."""

    per_host: dict[str, HostTraffic]
    local_bytes: int


def _shards(var: VariablePlan) -> list[tuple[str, list[int], PSSync | AllReduceSync]]:
    """(name, shape, synchronizer) of the variable, or of each shard as TF names them (`v/part_i`)."""
    syncs, shapes = var.synchronizers(), var.shard_shapes()
    if var.partition is None:
        return [(var.name, shapes[0], syncs[0])]
    return [(f"{var.name}/part_{i}", shape, sync) for i, (shape, sync) in enumerate(zip(shapes, syncs, strict=True))]


def _rows(name: str, distinct_rows: Mapping[str, Sequence[int]], num_workers: int) -> list[int]:
    counts = distinct_rows.get(name)
    if counts is None:
        raise ValueError(f"sparse variable '{name}': give the distinct rows each worker touches per step")
    if len(counts) != num_workers:
        raise ValueError(f"sparse variable '{name}': {len(counts)} distinct-row counts for {num_workers} worker(s)")
    return list(counts)


def _elements(shape: Sequence[int]) -> int:
    """Elements of a tensor of `shape`; a dimension unknown when the graph was built (-1) counts as 1,
    as in `VariableInfo.nbytes`, so the bytes of such a variable are a lower bound."""
    return prod(1 if d == -1 else d for d in shape)


def _ring_bytes(buffer: int, n: int) -> int:
    return -(-2 * (n - 1) * buffer // n)


def _all_reduce_buffer(shape: list[int], itemsize: int, sync: AllReduceSync) -> int:
    if sync.compressor in ("fp16", "fp16-ef"):
        return _elements(shape) * 2
    if sync.compressor == "powersgd" and low_rank_applies(shape, sync.powersgd_rank):
        n = shape[0]
        return (n + prod(shape) // n) * sync.powersgd_rank * itemsize
    return _elements(shape) * itemsize


@dataclass(frozen=True)
class ShardTransfers:
    """The transfers of one step for one planned variable, or one shard of a partitioned one."""

    name: str  # the variable's name, or TF's shard name `v/part_i`
    sync: PSSync | AllReduceSync
    transfers: list[Transfer]


def pools_bags(var: VariablePlan, num_workers: int, replicas: int = 1) -> bool:
    """Whether the runtime pools the lookups of `var` over their bags when they can be (its
    `VariableInfo.pooled`): a sparse-gradient table every piece of which is on a PS task with
    `pool_bags` and no local proxy (the matcher pools only a table whose gathers all run on PS
    tasks; a proxy's reads are local), trained by more than one worker (the runtime leaves a
    one-worker plan's lookups alone) with one in-graph replica each (the replicas' copied gathers
    and concatenated gradients are not the chains the matcher reads)."""
    return num_workers > 1 and replicas <= 1 and var.grad == "sparse" and all(
        isinstance(s, PSSync) and s.pool_bags and not s.local_proxy for s in var.synchronizers())


def pooled_bags(var: VariablePlan, facts: PooledBags | None, num_workers: int,
                replicas: int = 1) -> PooledBags | None:
    """The one rule for "is this table counted as pooled": `facts` (its `VariableInfo.pooled`) when
    the plan pools its lookups (`pools_bags`) and the examples of a step are known; else None, and
    the table is counted by its rows. The bound, the cost model and Auto's notes all ask this."""
    usable = facts is not None and facts.examples is not None
    return facts if usable and pools_bags(var, num_workers, replicas) else None


def replicas_per_worker(strategy: Strategy) -> int:
    """The most in-graph replicas a worker of `strategy` runs (1 when the plan leaves them unset)."""
    return max((len(strategy.replicas_of(w)) for w in range(strategy.num_workers)), default=0) or 1


def variable_transfers(
    var: VariablePlan, num_workers: int, distinct_rows: Mapping[str, Sequence[int]],
    pooled: PooledBags | None = None, replicas: int = 1,
) -> list[ShardTransfers]:
    """The transfers of one synchronous step at the bound for `var`, per shard (one entry when it is
    whole). `distinct_rows` as for `step_transfers`; `pooled`, the variable's pooled lookups
    (`VariableInfo.pooled`), counted as such when `pooled_bags` says so for `num_workers` workers
    of `replicas` in-graph replicas each."""
    n = num_workers
    itemsize = dtype_itemsize(var.dtype)
    shards = _shards(var)
    bags = pooled_bags(var, pooled, n, replicas)
    if bags is not None:
        return _pooled_transfers(var, shards, n, distinct_rows, bags)
    out = []
    for name, shape, sync in shards:
        transfers: list[Transfer] = []
        nbytes = _elements(shape) * itemsize
        row = _elements(shape[1:]) * itemsize
        sparse = var.grad == "sparse"
        rows = _rows(name, distinct_rows, n) if sparse else []
        if isinstance(sync, PSSync):
            server = ps(sync.ps_task)
            for w in range(n):
                if sync.local_proxy:
                    transfers.append(Transfer(server, worker(w), nbytes, f"{name}: whole variable to the proxy"))
                elif sparse:
                    transfers.append(Transfer(server, worker(w), rows[w] * row, f"{name}: distinct rows pulled"))
                else:
                    transfers.append(Transfer(server, worker(w), nbytes, f"{name}: value pulled"))
                if sparse:
                    transfers.append(Transfer(worker(w), server, rows[w] * (row + INDEX_BYTES),
                                              f"{name}: distinct ids and summed gradient rows pushed"))
                else:
                    transfers.append(Transfer(worker(w), server, nbytes, f"{name}: gradient pushed"))
        elif n > 1:
            for w in range(n):
                successor = (w + 1) % n
                if sparse:
                    passed = sum(rows[v] for v in range(n) if v != successor) * (row + INDEX_BYTES)
                    transfers.append(Transfer(worker(w), worker(successor), passed,
                                              f"{name}: distinct rows all-gathered"))
                else:
                    transfers.append(Transfer(worker(w), worker(successor),
                                              _ring_bytes(_all_reduce_buffer(shape, itemsize, sync), n),
                                              f"{name}: ring all-reduce"))
        out.append(ShardTransfers(name, sync, transfers))
    return out


def _pooled_transfers(var: VariablePlan, shards: list[tuple[str, list[int], PSSync | AllReduceSync]], n: int,
                      distinct_rows: Mapping[str, Sequence[int]], bags: PooledBags) -> list[ShardTransfers]:
    """A pooled table's transfers (the module docstring's bullet): per shard and worker, the partial
    sums back; its distinct ids and their
    occurrences out, with d_sum on the table's first shard of each PS task."""
    sums = bags.sums_bytes(_elements(var.shape[1:]) * dtype_itemsize(var.dtype))
    assert sums is not None  # pooled_bags passes only facts whose examples are known
    rows = {name: _rows(name, distinct_rows, n) for name, _, _ in shards}
    touched = [sum(r[w] for r in rows.values()) for w in range(n)]
    carries_d_sum: dict[int, str] = {}
    for name, _, sync in shards:
        assert isinstance(sync, PSSync)
        carries_d_sum.setdefault(sync.ps_task, name)
    out = []
    for name, _, sync in shards:
        assert isinstance(sync, PSSync)
        server = ps(sync.ps_task)
        d_sum = sums if carries_d_sum[sync.ps_task] == name else 0
        transfers = []
        for w, u in enumerate(rows[name]):
            # every shard sums every step, zeros where it holds none of the worker's ids
            transfers.append(Transfer(server, worker(w), sums, f"{name}: per-example partial sums pulled"))
            ids = u * INDEX_BYTES + _occurrences(bags.ids, u, touched[w]) * OCCURRENCE_BYTES
            transfers.append(Transfer(worker(w), server, ids + d_sum, f"{name}: distinct ids and their occurrences"
                                      + (" pushed, and d_sum" if d_sum else " pushed")))
        out.append(ShardTransfers(name, sync, transfers))
    return out


def _occurrences(ids: int | None, distinct: int, touched: int) -> int:
    """A shard's part of the step's `ids` (repeats included) when it holds `distinct` of the
    `touched` distinct rows of the worker's step: in proportion, never fewer than its distinct
    ids; those alone when the graph does not say how many ids a step looks up."""
    if ids is None or touched <= 0:
        return distinct
    return max(distinct, round(ids * distinct / touched))


def step_transfers(strategy: Strategy, distinct_rows: Mapping[str, Sequence[int]],
                   pooled: Mapping[str, PooledBags] | None = None) -> list[Transfer]:
    """The transfers of one synchronous step at the bound, for every planned variable or shard.

    `distinct_rows` gives, for every sparse-gradient variable (by name) or shard of one
    (`name/part_i`), the distinct rows each worker touches in the step, by worker index. Every
    planned variable counts as read by every worker in every step. `pooled` gives the variables
    whose lookups are pooled over their bags (by name, `VariableInfo.pooled`); none when not given.
    """
    bags = pooled or {}
    replicas = replicas_per_worker(strategy)
    return [
        t
        for var in strategy.variables
        for shard in variable_transfers(var, strategy.num_workers, distinct_rows, bags.get(var.name), replicas)
        for t in shard.transfers
    ]


def wire_bound(transfers: Sequence[Transfer], hosts: Mapping[TaskId, str]) -> WireBound:
    """Bytes each host sends to and receives from other hosts, and the bytes that stay on a host."""
    sent = {host: 0 for host in hosts.values()}
    received = dict(sent)
    local = 0
    for t in transfers:
        src, dst = hosts[t.source], hosts[t.destination]
        if src == dst:
            local += t.nbytes
        else:
            sent[src] += t.nbytes
            received[dst] += t.nbytes
    return WireBound({h: HostTraffic(sent[h], received[h]) for h in sent}, local)


def lower_bound(strategy: Strategy, distinct_rows: Mapping[str, Sequence[int]], spec: ClusterSpec,
                pooled: Mapping[str, PooledBags] | None = None) -> WireBound:
    """The bound of one step of `strategy` on the cluster `spec` (see the module docstring)."""
    return wire_bound(step_transfers(strategy, distinct_rows, pooled), task_hosts(spec))
