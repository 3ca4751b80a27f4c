"""The cost model: a strategy's time per step and bytes per node on a cluster, from facts alone.

Pure Python and numpy (no TensorFlow, no network): a ModelProfile (the graph, its compute time per
step, the rows its sparse variables touch), a ClusterSpec, NetworkFacts and a few free
`Coefficients` in; a `Prediction` out. docs/cost-model.md states every formula; in short:

- Bytes: `wire_bound.variable_transfers`, the one source of each strategy's bytes per step (PS pulls
  and pushes of dense values and of the distinct touched rows, or of per-example sums for a table
  whose lookups are pooled over their bags on the PS, shards, local proxies, ring all-reduce with
  compression, sparse all-gather).
- Links: every transfer between two hosts loads the sender's outgoing side, the receiver's incoming
  side and the pair's path; a transfer inside one host loads that host's local path. A host's
  outgoing (incoming) capacity is the fastest path measured from (to) it. A group of transfers that
  runs at the same time takes as long as its busiest resource needs: (bytes + share × the bytes
  going the other way on that link − what its token bucket passes at once) / (capacity × factor).
- Flows converging on one shaped port: in a phase where a host receives from senders that also
  send to other hosts (an all-to-all: a sharded PS's reads and pushes), its received side waits
  for senders that serve their flows one at a time and passes its bytes at 1 − Π_s (1 − p_s) of its
  rate, p_s the share of sender s's bytes that go to it (`Paths.receiving_share`).
- Critical path of a synchronous step, nothing overlapped: pull (synchronous PS variables are read
  before the step computes) + compute + after-compute (gradients pushed to PSs and all-reduced,
  concurrently, sharing the links) + latencies + per-variable overheads (every piece, and more
  for each accumulator the synchronous PS pieces push into: one per sparse or large dense piece,
  one per PS task for the small dense ones, as the runtime batches them) + a per-PS-task overhead for every
  worker and PS task of the step (each worker's step runs a subgraph on each synchronous PS task
  it reads from and pushes to; a sum over the workers, so not slowed again by their sharing CPUs). PS chunks (a large dense variable cut into shards on one PS, as PS
  and PSLoadBalancing do) are pulled back after compute as each is applied, while later chunks are
  still pushed, in a step without collectives: a two-stage pipeline, max(pushes, pulls) plus one
  chunk of the shorter (`chunk_pipeline_fill`). Each worker's own timeline: when one host's
  sent side binds the reads (a fan-out) and serves the workers in turn (what of each flow its
  queue holds), the first workers push while the later ones read: a two-stage flow shop over the
  workers, none of whose reads is in before the other senders' phase ends (`Paths.served_in_turn`,
  `workers_in_turn_overlap`); on shared CPUs the workers then compute at staggered times, sharing
  the CPUs only with those computing at once (`compute_ends`).
- Token buckets: a phase passes what its path's bucket refilled while the path idled before it:
  the pushes and collectives what the compute refilled; the reads a full bucket on a path idle
  after compute, else what the step's tail (its latencies and overheads) refilled. Communication of PS
  variables with staleness or asynchronous updates overlaps the rest, so the step is at least the
  time the links (or the shared CPUs, below) need for all of its bytes.
- A TF2 script's plans (the profile's `GraphItem.kind` "tf2") follow TF2 mode's PS runtime where it
  differs from graph mode's: every dense gradient of one PS task and dtype in one accumulator, and
  a split variable whose Keras 3 optimizer is not element-wise updated on the chief (each shard's
  mean to the chief and its value back, a phase after the pushes).
- Hosts that share one machine's CPUs (the benchmark's namespace hosts, `NetworkFacts.shared_cpus`):
  the bytes between hosts also cost the machine's CPUs (sender and receiver), and that work adds
  to each phase's link time rather than running beside it: a message is written out before it is
  sent and read after all of it has arrived (`Paths.cpu_seconds`). Compute and the per-message and
  per-variable work run workers/CPUs times slower when there are more workers than CPUs and all
  compute at once. And a step takes at least every process's CPU work over the CPUs: compute,
  collectives, PS calls and pieces, as measured in plain TensorFlow (`StepCost.cpu_work_s`).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from adrun.errors import UserError
from adrun.graph_item import GraphItem, PooledBags, dtype_itemsize
from adrun.placement import TaskId, ps, replica_devices, task_hosts, worker
from adrun.spec import ClusterSpec

from .document import PSSync, Strategy, VariablePlan, shard_sizes
from .facts import Link, ModelProfile, NetworkFacts, NodeBytes, Prediction, RowsTouched
from .optimizer_state import updates_read_step_state
from .wire_bound import pooled_bags, variable_transfers


# Dense gradients under this size bound for one PS task share one accumulator (one push and one
# take per task, dtype and step): the runtime's BATCH_BELOW_BYTES (runtime/kernels/ps_sync.py, which
# imports TensorFlow; tests/unit/strategies/test_cost_model_structure.py keeps the two equal).
PS_BATCH_BELOW_BYTES = 256 * 1024
# The analytical values of the two terms no textbook figure gives: fitted once by `fit`, from
# priors of 0, on the earliest recorded benchmark run (seven builders of the sparse workload on 2
# hosts at 100 Mbit/s, bench/results/cluster-quick.json) and rounded to one digit; docs/cost-model.md
# says how the model does with them on the later, larger run.
PS_VARIABLE_OVERHEAD_S = 3e-4
REVERSE_TRAFFIC_SHARE = 0.07
# The analytical value of the per-PS-task term: fitted by `fit`, from a prior of 0 (the other
# coefficients from their analytical values), on the 2-host runs of the benchmark's 100 Mbit/s link
# (bench/results/cluster.json: 3 workloads x 4 builders, 0.397 ms) and rounded to one digit; the
# 4-host runs it is checked against (bench/results/cluster-ncf-4h.json) did not set it. (On those
# 2-host runs 2 workers shared 2 CPUs, no contention: the value holds for the term without it.)
PS_TASK_OVERHEAD_S = 4e-4
# The analytical value of a shared machine's CPU rate for moving bytes between hosts: measured, not
# fitted, on the benchmark's namespace hosts at 1 Gbit/s (bench/results/cluster-ringcpu-dense-dc.json,
# /proc sampled beside it by bench/cluster/cpu_sample.py): the dense ring's workers spent 7.3e8-8.6e8
# bytes sent and received per CPU second beyond their compute (21-25 ms a worker, 1-host runs) at 2
# and 4 hosts (messages of 3-6 MB, whose own cost is negligible), rounded to one digit. That CPU
# includes the ring's own per-step and per-op work (one all-reduce group: COLLECTIVE_STEP_CPU_S +
# COLLECTIVE_OP_CPU_S, 1.8 ms a worker of its 30-34 ms beyond compute at 2 hosts, 49-53 ms at 4):
# net of it the same runs read 7.6e8-9.2e8 (51.8 MB over 2 x (30-34 - 1.8) ms, 155.3 MB over
# 4 x (49-53 - 1.8) ms), the same 8e8 to one digit, so `StepCost.cpu_work_s` adding the collective
# terms to the bytes at this κ counts that 1.8 ms twice only below the value's precision. (Until
# 2026-11-26 1.5e8, fitted on 2-host runs of a model where this work ran beside the links:
# bench/RESULTS-cluster-tf2-reading.md, "Thirteenth session".)
STACK_BYTES_PER_CPU_S = 8e8
# What one synchronous PS task's part in a step costs, beyond its messages, when it and the one
# worker share one machine of few CPUs (NetworkFacts.shared_cpus: the benchmark's 1-host groups):
# measured, not fitted, on the benchmark's 2-CPU machine in plain TensorFlow (bench/loopback_ps_step.py
# --hops, bench/results/loopback-hops.json): a step that touches a PS task at all takes 1.15-1.95 ms
# more than the same step on the worker alone beyond its two messages (the task's subgraph call and
# its completion, ~37 thread hand-offs between the two processes, each waiting for a CPU), rounded
# to two digits.
# The fitted PS_TASK_OVERHEAD_S stands for every other placement (docs/cost-model.md, "The one-host
# PS step: hand-offs between two processes").
ONE_HOST_TASK_CALL_S = 1.7e-3
# The CPU work of a step's synchronization, per worker, that bounds a step on CPUs the hosts share
# (NetworkFacts.shared_cpus; `StepCost.cpu_work_s`): measured, not fitted, in plain TensorFlow on
# the benchmark's 2-CPU machine, as utime + stime. Collectives: one worker's own CPU
# (bench/collective_cpu.py, bench/results/collective-cpu.json: two workers, K = 1-8 independent
# CollectiveReduceV2 / CollectiveGatherV2 ops of 1 KB a step): a worker's step with any collective
# costs it 1.37 ms more CPU than without, and each op 0.42 ms more (the least-squares line over
# K >= 1; reduces 0.51, gathers 0.33). The PS terms: summed over the worker and the PS task
# (bench/loopback_ps_step.py on loopback, bench/results/loopback-hops.json and loopback-ps-step.json,
# ncf's model with one worker): a synchronous PS task's call plus its two messages (their CPU,
# about 2 x 0.33 ms, is in it), chain_1 against chain_0, 1.72 ms; each sparse variable read (a
# gather of its rows) and updated (a scatter), 0.72 ms more (ncf's two embeddings on the PS,
# `embeddings_on_ps` against `local`, less the call); each dense one, 0.22 ms (its six small dense
# variables, `ps` against `embeddings_on_ps`); rounded to two digits. The figures are one worker's
# (n = 1: its reads, its push and the apply, no accumulator or token); `cpu_work_s` takes them n
# times for n workers. With n workers each reads and pushes into the accumulators, the chief takes
# and applies once and releases each other worker through a token: checked at n = 2 and 3 in
# plain TensorFlow with adrun's own synchronization kernels (bench/loopback_ps_workers.py,
# bench/results/loopback-ps-workers.json, ncf's model, 9 rounds per n from 3 invocations): the
# synchronization's CPU over every process was 0.91-1.19 of n times the same session's n = 1
# median (ps 0.95, 1.03; embeddings 1.16, 1.19; one 8 x 8 variable 0.91, 1.07), each median inside
# n times the n = 1 rounds' min-max. The line over n = 1-3, P = n s + i, does not resolve i (ps
# +0.34 +- 0.91 ms, embeddings -0.52 +- 0.87, tiny -0.35 +- 0.42; over n = 2-3 alone, where the
# mechanism is one, embeddings +1.76 pooled / +0.98 quiet, tiny -0.76 / -1.28); that the chief's one
# apply pays for the others' tokens is a reading, not a result. The quietest invocation puts every
# n > 1 median but the tiny n = 2 outside n times the n = 1 range (ps 0.93, 0.92 below; embeddings
# 1.15, 1.18 and tiny n = 3 1.12 above; its n = 3 taken at another load than its n = 1). What n
# times stands on: for ncf's whole PS synchronization it reads 0.92-1.03, within the model's
# tolerance. The quietest invocation suggests a split (a sparse piece ~1.1 ms a worker at n > 1,
# its rows merged and sparse-accumulated; a batched dense piece ~0.05): docs/cost-model.md, "The
# PS terms at n workers", says what taking it would do. Stale PS variables' calls are not counted.
COLLECTIVE_STEP_CPU_S = 1.4e-3
COLLECTIVE_OP_CPU_S = 4.2e-4
PS_CALL_CPU_S = 1.7e-3
PS_SPARSE_PIECE_CPU_S = 7.2e-4
PS_DENSE_PIECE_CPU_S = 2.2e-4
# Keras 3 optimizers whose update step treats each element on its own, so that TF2 mode updates a
# split PS variable shard by shard on each shard's PS (adrun/runtime/tf2/ps_shard_updates.py,
# `_ELEMENT_WISE`, which imports TensorFlow; tests/unit/strategies/test_cost_model_tf2.py keeps the
# two equal). Any other class's update of a split variable runs on the chief.
TF2_SHARD_WISE_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Nadam", "Adagrad", "RMSprop", "Adadelta",
                                       "Ftrl", "Lion"})


class Coefficients(BaseModel):
    """The model's free coefficients. `analytical()` are the values taken before any trial run; the
    fit (strategies/fit.py) moves them towards what a cluster's recorded runs measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # effective / measured bandwidth, for paths between hosts and inside one host
    remote_bandwidth_factor: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    local_bandwidth_factor: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    # software cost of one message (a gRPC call, one step of a collective) beyond the path's latency
    message_latency_s: float = Field(default=1e-4, ge=0, allow_inf_nan=False)
    # per synchronized variable or shard and step: the worker's send/receive/apply ops
    variable_overhead_s: float = Field(default=5e-5, ge=0, allow_inf_nan=False)
    # per synchronous PS variable or shard and step, on top of the above: its own read and push RPCs
    # and the PS's accumulate/apply ops (a collective packs a group's variables into one buffer)
    ps_variable_overhead_s: float = Field(default=PS_VARIABLE_OVERHEAD_S, ge=0, allow_inf_nan=False)
    # share of the opposite direction's bytes that also load a path (acknowledgements, flow-control
    # and RPC requests queued behind the other direction's data on a busy full-duplex link)
    reverse_traffic_share: float = Field(default=REVERSE_TRAFFIC_SHARE, ge=0, le=1, allow_inf_nan=False)
    # per worker and synchronous PS task in use, per step: a worker's step runs one subgraph on each
    # PS task it reads from and pushes to (the call, the task's executor, the wake-ups), and every
    # PS task serves one per worker, so a plan spread over more PS tasks pays N more each. The
    # step pays the sum over the workers, which on CPUs shared by more workers than CPUs is not
    # slowed again (the contention counts the same workers)
    ps_task_overhead_s: float = Field(default=PS_TASK_OVERHEAD_S, ge=0, allow_inf_nan=False)
    # measured compute time per step -> compute time in the distributed run
    compute_factor: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    # bytes one CPU passes between hosts per second (the tasks' RPC layer, the kernel's stack and the
    # software switch between namespaces), a byte counted once where it is sent and once where it is
    # received; only where the facts say the hosts share one machine's CPUs (NetworkFacts.shared_cpus),
    # as time added to each phase (`Paths.cpu_seconds`). Transfers inside a host (loopback) are left
    # to its local path.
    stack_bytes_per_cpu_s: float = Field(default=STACK_BYTES_PER_CPU_S, gt=0, allow_inf_nan=False)

    @classmethod
    def analytical(cls) -> Coefficients:
        return cls()


# ---------------------------------------------------------------------------------------------
# The cluster's paths as resources


@dataclass(frozen=True)
class Paths:
    """The resources a step's transfers load, with their measured capacity (bytes/s) and token
    bucket (bytes, 0 for a path that is not shaped or not known to be).

    Resource i is named `names[i]`: `A -> B` (the path from host A to host B), `A sent` / `A
    received` (everything host A sends to / receives from other hosts), `A local` (transfers
    between two tasks of host A).
    """

    hosts: list[str]
    task_host: dict[TaskId, str]
    names: list[str]
    capacity: np.ndarray
    burst: np.ndarray  # bytes the resource passes at once at the start of a phase (a token bucket)
    is_local: np.ndarray
    index: dict[tuple[str, str, str], int]  # (kind, host, other host or "") -> resource
    opposite: np.ndarray  # resource -> the other direction of the same link (`B -> A`, `A received`); itself if local
    ps_latency: dict[int, float]  # PS task -> one-way latency to its farthest worker (`_farthest_worker_latency`)
    ring_latency: float  # worst one-way latency between ring neighbours (workers in task order)
    num_workers: int
    # hosts sharing one machine's CPUs (NetworkFacts.shared_cpus): the resource of its CPUs' work on
    # the bytes between hosts (capacity: the CPUs that work on them at once, one per host at most,
    # as a host's worker and PS task handle its messages and the kernel its packets), and how much
    # slower each worker computes and runs its per-message and per-variable work than alone:
    # workers / CPUs, at least 1
    cpu_resource: int | None = None
    cpu_contention: float = 1.0
    # host -> what the sender's queue on its fastest outgoing path holds (Link.queue_bytes; 0 unknown)
    sent_queue: dict[str, float] = field(default_factory=dict)
    shared_cpus: float | None = None  # NetworkFacts.shared_cpus: all of the machine's CPUs (`cpus`)
    # the most in-graph replicas a worker runs (placement.replica_devices, as the builders plan
    # them): a table's lookups pool only with one (wire_bound.pools_bags)
    replicas: int = 1

    @classmethod
    def of(cls, spec: ClusterSpec, network: NetworkFacts) -> Paths:
        task_host = task_hosts(spec)
        hosts = list(dict.fromkeys(node.address for node in spec.nodes))
        names: list[str] = []
        capacity: list[float] = []
        burst: list[float] = []
        is_local: list[bool] = []
        index: dict[tuple[str, str, str], int] = {}

        def add(key: tuple[str, str, str], name: str, bytes_per_s: float, burst_bytes: float, local: bool) -> None:
            index[key] = len(names)
            names.append(name)
            capacity.append(bytes_per_s)
            burst.append(burst_bytes)
            is_local.append(local)

        link = _link_lookup(network)
        for src in hosts:
            for dst in hosts:
                if src != dst:
                    path = link(src, dst)
                    add(("pair", src, dst), f"{src} -> {dst}", path.bytes_per_s, path.burst_bytes, False)
        for host in hosts:
            others = [h for h in hosts if h != host]
            out = max((link(host, h) for h in others), key=lambda p: p.bytes_per_s, default=None)
            into = max((link(h, host) for h in others), key=lambda p: p.bytes_per_s, default=None)
            add(("sent", host, ""), f"{host} sent", out.bytes_per_s if out else math.inf,
                out.burst_bytes if out else 0.0, False)
            add(("received", host, ""), f"{host} received", into.bytes_per_s if into else math.inf,
                into.burst_bytes if into else 0.0, False)
            add(("local", host, ""), f"{host} local", network.local.bytes_per_s, network.local.burst_bytes, True)

        cpu_resource, contention = None, 1.0
        if network.shared_cpus is not None:
            cpu_resource = len(names)
            add(("cpu", "", ""), "the machine's CPUs", float(min(network.shared_cpus, len(hosts))), 0.0, False)
            contention = max(1.0, spec.num_workers / network.shared_cpus)
        reverse = {"pair": "pair", "sent": "received", "received": "sent", "local": "local", "cpu": "cpu"}
        opposite = np.array([index[reverse[kind], b, a] if kind == "pair" else index[reverse[kind], a, b]
                             for kind, a, b in index])
        workers = [task_host[worker(w)] for w in range(spec.num_workers)]
        ps_latency = {p: _farthest_worker_latency(task_host[ps(p)], workers, link) for p in range(spec.num_ps)}
        n = len(workers)
        ring = max((link(workers[w], workers[(w + 1) % n]).latency_s for w in range(n)), default=0.0)
        sent_queue = {h: max((link(h, o) for o in hosts if o != h), key=lambda p: p.bytes_per_s).queue_bytes
                      for h in hosts if len(hosts) > 1}
        return cls(hosts, task_host, names, np.array(capacity, dtype=float), np.array(burst, dtype=float),
                   np.array(is_local), index, opposite, ps_latency, ring, spec.num_workers, cpu_resource, contention,
                   sent_queue, None if network.shared_cpus is None else float(network.shared_cpus),
                   max((len(d) for d in replica_devices(spec)), default=0) or 1)

    def zeros(self) -> np.ndarray:
        return np.zeros(len(self.names))

    def load(self, bytes_by_resource: np.ndarray, source: TaskId, destination: TaskId, nbytes: float) -> None:
        """Add one transfer between two tasks to `bytes_by_resource`."""
        src, dst = self.task_host[source], self.task_host[destination]
        if src == dst:
            bytes_by_resource[self.index["local", src, ""]] += nbytes
        else:
            if self.cpu_resource is not None:  # sent by one host's stack, switched, received by another's
                bytes_by_resource[self.cpu_resource] += 2 * nbytes
            bytes_by_resource[self.index["pair", src, dst]] += nbytes
            bytes_by_resource[self.index["sent", src, ""]] += nbytes
            bytes_by_resource[self.index["received", dst, ""]] += nbytes

    def effective(self, c: Coefficients) -> np.ndarray:
        factor = np.where(self.is_local, c.local_bandwidth_factor, c.remote_bandwidth_factor)
        if self.cpu_resource is not None:
            factor[self.cpu_resource] = c.stack_bytes_per_cpu_s
        return self.capacity * factor

    def seconds(self, bytes_by_resource: np.ndarray, c: Coefficients) -> np.ndarray:
        """Seconds each resource spends on some bytes at its rate: the bytes, plus the
        reverse-traffic share of the bytes going the other way on the same link (between hosts),
        over its effective capacity."""
        return self._load(bytes_by_resource, c) / self.effective(c)

    def phase_seconds(self, bytes_by_resource: np.ndarray, c: Coefficients, burst: np.ndarray) -> np.ndarray:
        """Seconds each resource needs for a set of transfers that run at the same time: as
        `seconds`, less the `burst` bytes its token bucket passes at once at the phase's start, and
        with the time a host's received side waits for its senders (`receiving_share`: its own
        bytes take 1 / share of their time; the reverse-traffic share of its other direction does
        not wait for them)."""
        waiting = bytes_by_resource / self.receiving_share(bytes_by_resource) - bytes_by_resource
        return np.maximum(0.0, self._load(bytes_by_resource, c) + waiting - burst) / self.effective(c)

    @functools.cached_property
    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The resource of each path between two hosts as a hosts x hosts matrix (sender, receiver;
        the diagonal points at the first resource and is masked), and of each host's received side."""
        hosts = self.hosts
        pair = np.array([[self.index["pair", a, b] if a != b else 0 for b in hosts] for a in hosts], dtype=int)
        return pair, np.array([self.index["received", h, ""] for h in hosts], dtype=int)

    def receiving_share(self, bytes_by_resource: np.ndarray) -> np.ndarray:
        """Per resource, the share of its time it can be busy in a phase of `bytes_by_resource`: 1,
        except for the received side of a host that several senders send to while they also send
        to other hosts (flows converging on one shaped port in an all-to-all phase).

        A phase's transfers start together (the runtime issues a step's PS reads, and its pushes,
        all at once: runtime/kernels/ps_sync.py, gradient_sync.py), and each sender's port is one
        shaped FIFO queue that one TCP connection can fill (the kernel lets a socket queue more
        than the shaper's whole queue): a sender serves its flows one after another, in an order
        that no other sender knows. A receiver's port is then busy only while at least one of its
        senders is serving it, the head-of-line effect of an input-queued switch: with p_s the
        share of sender s's bytes between hosts in the phase that go to receiver r, r is idle
        Π_s (1 − p_s) of the time, so it passes its bytes at (1 − Π_s (1 − p_s)) of its rate.
        A ring or an incast (every sender sends only to r, p_s = 1) and a fan-out (r's one sender
        is bound by its own port anyway) lose nothing; an all-to-all over 4 hosts (three senders,
        p_s = 1/3 each) passes 1 − (2/3)³ = 0.70. A runtime that orders a phase's flows so that no
        two senders serve one receiver at once (a staggered all-to-all) would lose nothing either:
        this function is where the model follows the runtime's order."""
        share = np.ones(len(self.names))
        if len(self.hosts) < 3:  # each receiver has one sender
            return share
        pair, received = self._pairs
        flows = np.where(np.eye(len(self.hosts), dtype=bool), 0.0, bytes_by_resource[pair])
        sent = flows.sum(axis=1, keepdims=True)
        p = np.divide(flows, sent, out=np.zeros_like(flows), where=sent > 0)
        busy = 1.0 - np.prod(1.0 - p, axis=0)
        share[received] = np.where(busy > 0, busy, 1.0)
        return share

    def served_in_turn(self, bytes_by_resource: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float]:
        """Whether a phase of `bytes_by_resource` (taking `seconds` per resource) serves the hosts'
        workers one after another: (k, share, others). When a host's sent side binds the phase
        (its seconds are the phase's; the receivers of a fan-out, waiting for it, may tie), k is
        the hosts it sends to, counted as its bytes over its largest flow's (k equal flows: k; one
        flow that dominates: about 1), else 1 (a receiver's side, a path or loopback binding:
        what it carries ends for its one receiver, or for all, at once; the phase's work on shared
        CPUs is not among `seconds`, it is added after, `cpu_seconds`). `share` is the
        part of a flow the sender serves in turn rather than beside the others: a flow's message
        written at once enters the sender's queue whole when it fits (Link.queue_bytes), and the
        queue passes it before the next flow's; of a larger one the queue holds queue / flow
        bytes, and the rest goes side by side with the other flows as the queue drains (tc's
        token bucket drops what does not fit: bench's probes, docs/performance.md). 0 when the
        queue is not known: the flows then share the sender evenly and all end together.
        `others`: the next busiest sent side's seconds over the binding one's. A worker's reads
        from the other senders end in their own orders, at any time of their phases, so no
        worker has all its reads before they end, at the latest: `workers_in_turn_overlap` takes
        that share of the phase as the earliest a worker's reads are in (one PS host sending: 0;
        two alike: 1, all at the phase's end, nothing in turn).

        Hook (issue 21.3): which PS hosts a worker exchanges with when is the runtime's (today
        every worker's transfers start together, in no order shared between workers); a runtime
        that orders them (staggered rounds) changes who waits for whom here and in
        `receiving_share`, the two places the model reads that order."""
        pair, received = self._pairs
        sent = np.array([self.index["sent", h, ""] for h in self.hosts], dtype=int)
        row = int(np.argmax(seconds[sent]))
        if seconds[sent[row]] <= 0 or seconds[sent[row]] < np.delete(seconds, received).max() * (1 - 1e-9):
            return 1.0, 0.0, 0.0
        flows = np.delete(bytes_by_resource[pair[row]], row)
        largest = float(flows.max())
        others = float(np.delete(seconds[sent], row).max()) / float(seconds[sent[row]])
        return float(flows.sum() / largest), min(1.0, self.sent_queue[self.hosts[row]] / largest), others

    def off_cpus(self, bytes_by_resource: np.ndarray) -> np.ndarray:
        """`bytes_by_resource` without its load on the machine's CPUs (a copy): what the links of a
        phase carry, whose time `cpu_seconds` adds to."""
        out = bytes_by_resource.copy()
        if self.cpu_resource is not None:
            out[self.cpu_resource] = 0.0
        return out

    def cpu_seconds(self, bytes_by_resource: np.ndarray, c: Coefficients) -> float:
        """Seconds a phase of `bytes_by_resource` spends on the machine's CPUs beyond its links'
        time: the bytes between hosts through the CPUs (`load`: once sent, once received) at κ
        per CPU, over one CPU per host at most (a host's worker and PS task handle its messages,
        the kernel its packets): the larger of all the bytes over the CPUs that work on them at
        once (the resource's capacity) and the busiest host's sent and received bytes over its
        one CPU (an incast: the bytes meet at one host). Added to the links' time, not
        overlapped with it: the runtime's messages are few and large (one per variable, shard or
        ring round and peer), each written out before it goes on the wire and read after all of
        it has arrived, and a ring's next round sends what this one received (measured:
        bench/RESULTS-cluster-tf2-reading.md, "Thirteenth session"). 0 for hosts with CPUs of
        their own (their stacks are not the model's)."""
        if self.cpu_resource is None:
            return 0.0
        spread = float(bytes_by_resource[self.cpu_resource] / self.capacity[self.cpu_resource])
        index = self.index
        per_host = max(float(bytes_by_resource[index["sent", h, ""]] + bytes_by_resource[index["received", h, ""]])
                       for h in self.hosts)
        return max(spread, per_host) / c.stack_bytes_per_cpu_s

    def through_cpus(self, bytes_by_resource: np.ndarray) -> float:
        """The bytes of `bytes_by_resource` through the machine's CPUs (each byte between hosts
        once sent, once received); 0 for hosts with CPUs of their own."""
        return 0.0 if self.cpu_resource is None else float(bytes_by_resource[self.cpu_resource])

    @property
    def cpus(self) -> float | None:
        """The CPUs of the one machine the hosts share (NetworkFacts.shared_cpus); None for hosts
        with CPUs of their own."""
        return self.shared_cpus

    def refilled(self, idle_s: float | np.ndarray) -> np.ndarray:
        """The bytes each resource's token bucket holds after `idle_s` seconds without traffic
        (it refills at the path's rate, up to its size). No idle time refills nothing, also on a
        path of unbounded rate (an untimed profile's compute of 0, ModelProfile.untimed)."""
        with np.errstate(invalid="ignore"):  # inf * 0, replaced by 0 below
            refill = self.capacity * idle_s
        return np.minimum(self.burst, np.where(np.asarray(idle_s) > 0, refill, 0.0))

    def _load(self, bytes_by_resource: np.ndarray, c: Coefficients) -> np.ndarray:
        one_way = self.opposite != np.arange(len(self.opposite))  # a link's direction, not local or CPUs
        return bytes_by_resource + np.where(one_way, c.reverse_traffic_share * bytes_by_resource[self.opposite], 0.0)


def _farthest_worker_latency(at: str, workers: Sequence[str], link: Callable[[str, str], Link]) -> float:
    """The one-way latency a synchronous PS task on host `at` makes the step wait for: the worst of
    its paths to the other hosts that run workers, the local path only when every worker runs on
    `at`. A PS task serves its workers at once and the step ends with the last of them; a message
    to a worker of another host makes the same hand-off between two processes as one on loopback,
    plus its path (`Coefficients.message_latency_s` prices the hand-off between hosts). The local
    path's latency, measured as a one-host step's dependent message on loopback, hand-off included
    (bench/loopback_ps_step.py `--hops`), is not a path's latency that a remote worker adds to."""
    others = [w for w in dict.fromkeys(workers) if w != at]
    return max(link(at, w).latency_s for w in others) if others else link(at, at).latency_s


def _link_lookup(network: NetworkFacts) -> Callable[[str, str], Link]:
    """`network.link`, each pair looked up once, a missing one as a UserError naming it."""
    @functools.cache
    def link(src: str, dst: str) -> Link:
        try:
            return network.link(src, dst)
        except KeyError:
            raise UserError(
                f"network facts: nothing measured or given between {src} and {dst}; "
                "measure the cluster again or give that link in the spec"
            ) from None
    return link


# ---------------------------------------------------------------------------------------------
# Load: what a step (or one variable's part of it) puts on the paths


@dataclass
class Load:
    """Bytes per resource in each part of the step, and what its latencies depend on. Loads add up:
    a strategy's load is the sum of its variables' loads."""

    pull: np.ndarray  # synchronous PS reads, before compute
    after: np.ndarray  # synchronous PS pushes and collectives, after compute
    pushes: np.ndarray  # the synchronous PS pushes among `after` (each worker's own, not a collective)
    overlapped: np.ndarray  # PS variables with staleness or asynchronous updates: both directions
    # reads of PS chunks (`prefetched_chunks`): pulled back after compute as each chunk is applied,
    # while later chunks are still pushed, in a step without collectives; else read before compute
    prefetched: np.ndarray
    # TF2 mode's chief-side updates of split variables (`updated_on_the_chief`): each shard's mean to
    # the chief and its new value back, after every push is in and before the release
    on_chief: np.ndarray
    sync_ps: Counter = field(default_factory=Counter)  # PS task -> synchronous pieces on it
    # accumulators of the synchronous PS pieces: one each for a sparse or large dense gradient, one
    # per (PS task, dtype) for the small dense ones, which share it (`batched_in_accumulator`)
    own_accumulators: int = 0
    shared_accumulators: Counter = field(default_factory=Counter)  # (PS task, dtype) -> pieces sharing it
    stale_ps: Counter = field(default_factory=Counter)  # PS task -> stale/asynchronous pieces
    dense_groups: Counter = field(default_factory=Counter)  # all-reduce group -> dense pieces in it
    sparse_collectives: int = 0  # sparse pieces all-gathered, each its own collectives
    pieces: int = 0  # synchronized variables or shards
    chunks: Counter = field(default_factory=Counter)  # chunked variable -> its chunks (`prefetched`)
    sparse_sync_ps: int = 0  # the synchronous PS pieces among `sync_ps` whose gradients are sparse

    @classmethod
    def empty(cls, paths: Paths) -> Load:
        return cls(paths.zeros(), paths.zeros(), paths.zeros(), paths.zeros(), paths.zeros(), paths.zeros())

    def copy(self) -> Load:
        return Load(self.pull.copy(), self.after.copy(), self.pushes.copy(), self.overlapped.copy(),
                    self.prefetched.copy(), self.on_chief.copy(),
                    Counter(self.sync_ps), self.own_accumulators, Counter(self.shared_accumulators),
                    Counter(self.stale_ps), Counter(self.dense_groups), self.sparse_collectives, self.pieces,
                    Counter(self.chunks), self.sparse_sync_ps)

    @property
    def collectives(self) -> int:
        """All-reduce groups and all-gathered sparse pieces: the step's collectives."""
        return len(self.dense_groups) + self.sparse_collectives

    @property
    def prefetches(self) -> bool:
        """Whether the PS chunks are pulled back after compute: the runtime does so only in a step
        without collectives, whose end a PS token orders (runtime/kernels/gradient_sync.py)."""
        return bool(self.chunks) and self.collectives == 0

    @property
    def every(self) -> np.ndarray:
        """All of the step's bytes."""
        return self.pull + self.after + self.overlapped + self.prefetched + self.on_chief

    @property
    def reads(self) -> np.ndarray:
        """The bytes read before compute: the synchronous PS reads, and the chunks' when they are
        not pulled back after compute."""
        return self.pull if self.prefetches else self.pull + self.prefetched

    @property
    def accumulators(self) -> int:
        """Accumulators the synchronous PS pieces push into: what each pays o_ps for."""
        return self.own_accumulators + len(self.shared_accumulators)

    def add(self, other: Load, sign: int = 1) -> None:
        """Add `other` (sign 1) or take it away (sign -1)."""
        self.pull += sign * other.pull
        self.after += sign * other.after
        self.pushes += sign * other.pushes
        self.overlapped += sign * other.overlapped
        self.prefetched += sign * other.prefetched
        self.on_chief += sign * other.on_chief
        for mine, theirs in ((self.sync_ps, other.sync_ps), (self.shared_accumulators, other.shared_accumulators),
                             (self.stale_ps, other.stale_ps), (self.dense_groups, other.dense_groups),
                             (self.chunks, other.chunks)):
            for key, count in theirs.items():
                mine[key] += sign * count
                if mine[key] == 0:
                    del mine[key]
        self.own_accumulators += sign * other.own_accumulators
        self.sparse_sync_ps += sign * other.sparse_sync_ps
        self.sparse_collectives += sign * other.sparse_collectives
        self.pieces += sign * other.pieces


def _is_synchronous(sync: PSSync) -> bool:
    return sync.sync and sync.staleness == 0


def batched_in_accumulator(var: VariablePlan, shape: Sequence[int], tf2: bool = False) -> bool:
    """Whether a synchronous PS piece (the variable, or a shard of `shape`) shares its PS task's
    accumulator: a dense gradient of known shape under PS_BATCH_BELOW_BYTES, as graph mode batches
    them (runtime/kernels/ps_sync.py); in TF2 mode (`tf2`) every dense gradient, whatever its size,
    as TF2's exchange pushes one flat buffer per PS task and dtype (runtime/tf2/ps_exchange.py)."""
    if var.grad == "sparse" or any(d < 0 for d in shape):
        return False
    return tf2 or math.prod(shape) * dtype_itemsize(var.dtype) < PS_BATCH_BELOW_BYTES


def updated_on_the_chief(var: VariablePlan, graph: GraphItem) -> bool:
    """Whether TF2 mode runs the synchronous update of `var`, split over PS tasks, on the chief
    rather than shard by shard on each shard's PS: a Keras 3 optimizer whose update step is not
    element-wise (`TF2_SHARD_WISE_OPTIMIZERS`), as runtime/tf2/ps_shard_updates.py decides. The
    capture records a TF2 script's optimizer classes joined by ", " (runtime/tf2/applied.py); the
    plan does not say which one updates `var`, so any class not in the table, or none recorded,
    counts as not element-wise. The chief then reads each shard's mean gradient from its PS and
    writes the shard's new value back."""
    classes = (graph.optimizer or "").split(", ")
    return (graph.kind == "tf2" and var.partition is not None
            and not all(name in TF2_SHARD_WISE_OPTIMIZERS for name in classes)
            and any(isinstance(s, PSSync) and _is_synchronous(s) for s in var.partition.shards))


def prefetched_chunks(var: VariablePlan) -> list[str]:
    """The shards of `var` that the runtime pulls back as each is applied (runtime/kernels/
    ps_prefetch.py, `chunks` and `prefetchable`): the dense shards of a variable of known shape
    that share their synchronous PS task (staleness 0, no local proxy) with another of its shards,
    as PS and PSLoadBalancing cut a large dense variable (strategies/ps.py). Empty for any other
    variable. (The runtime also needs the variable read whole by the forward pass, which the plan
    cannot show: a variable read in pieces is counted as pulled back all the same.)"""
    if var.partition is None or var.grad != "dense" or any(d < 0 for d in var.shape):
        return []
    cached = {name: s.ps_task for name, s in zip(var.shard_names(), var.partition.shards, strict=True)
              if isinstance(s, PSSync) and _is_synchronous(s) and not s.local_proxy}
    sharing = Counter(cached.values())
    return [name for name, task in cached.items() if sharing[task] > 1]


def distinct_rows_of(var: VariablePlan, profile: ModelProfile, num_workers: int) -> dict[str, list[int]]:
    """Distinct rows each worker touches per step, for `var` (or each of its shards) when its
    gradients are sparse, from the profile (one process's steps stand for every worker's): a
    shard's part of the mean by where the touched rows lie (`RowsTouched.by_range`) when measured,
    else in proportion to its rows. Without a profiled figure, every row."""
    if var.grad != "sparse":
        return {}
    rows = max(var.shape[0], 1) if var.shape else 1  # an unknown size (-1) counts as 1 row, as in nbytes
    touched = profile.rows_touched.get(var.name)
    if touched is None:
        return {name: [max(shape[0], 1)] * num_workers
                for name, shape in zip(var.shard_names(), var.shard_shapes(), strict=True)}
    if var.partition is None:
        return {var.name: [round(touched.mean)] * num_workers}
    bounds = np.cumsum([0, *(shape[0] for shape in var.shard_shapes())])
    return {
        name: [min(hi - lo, round(_rows_between(touched, int(lo), int(hi), rows)))] * num_workers
        for name, lo, hi in zip(var.shard_names(), bounds[:-1], bounds[1:], strict=True)
    }


def _rows_between(touched: RowsTouched, lo: int, hi: int, rows: int) -> float:
    """Mean distinct rows per step with ids in [lo, hi): the measured slices' counts, a slice cut by
    the range counted in proportion to the part of it inside; without slices, the range's share of
    the mean."""
    if not touched.by_range or len(touched.by_range) > rows:
        return touched.mean * (hi - lo) / rows
    edges = np.cumsum([0, *shard_sizes(rows, len(touched.by_range))])
    total = 0.0
    for count, start, end in zip(touched.by_range, edges[:-1], edges[1:], strict=True):
        inside = min(hi, end) - max(lo, start)
        if inside > 0:
            total += count * inside / (end - start)
    return total


def pooled_bags_of(var: VariablePlan, profile: ModelProfile, num_workers: int, replicas: int = 1) -> PooledBags | None:
    """The pooled lookups of `var` (capture's `VariableInfo.pooled`) as its plan runs them on
    `num_workers` workers of `replicas` in-graph replicas each: `wire_bound.pooled_bags`'s rule (None,
    counted as rows, unless the plan pools them and the examples of a step are known)."""
    facts = next((v.pooled for v in profile.graph.variables if v.name == var.name), None)
    return pooled_bags(var, facts, num_workers, replicas)


def variable_load(var: VariablePlan, profile: ModelProfile, paths: Paths) -> Load:
    """One planned variable's part of a step's load. A TF2 script's (`GraphItem.kind` "tf2") by TF2
    mode's PS runtime: its accumulators (`batched_in_accumulator`) and, for a split variable its
    optimizer cannot update shard by shard, the chief's round trip of each shard after the pushes
    (`updated_on_the_chief`)."""
    load = Load.empty(paths)
    tf2 = profile.graph.kind == "tf2"
    on_chief = updated_on_the_chief(var, profile.graph)
    shards = variable_transfers(var, paths.num_workers, distinct_rows_of(var, profile, paths.num_workers),
                                pooled_bags_of(var, profile, paths.num_workers, paths.replicas), paths.replicas)
    chunks = set(prefetched_chunks(var))
    if chunks:
        load.chunks[var.name] = len(chunks)
    for shard, shape in zip(shards, var.shard_shapes(), strict=True):
        sync = shard.sync
        # a collective of one worker is no op (runtime/kernels/allreduce_sync.py): nothing to pay
        load.pieces += isinstance(sync, PSSync) or paths.num_workers > 1
        if isinstance(sync, PSSync) and _is_synchronous(sync):
            load.sync_ps[sync.ps_task] += 1
            load.sparse_sync_ps += var.grad == "sparse"
            if batched_in_accumulator(var, shape, tf2):
                load.shared_accumulators[sync.ps_task, var.dtype] += 1
            else:
                load.own_accumulators += 1
        elif isinstance(sync, PSSync):
            load.stale_ps[sync.ps_task] += 1
        elif var.grad == "sparse":
            load.sparse_collectives += 1
        else:
            load.dense_groups[sync.group] += 1
        for t in shard.transfers:
            if isinstance(sync, PSSync) and not _is_synchronous(sync):
                part = load.overlapped
            elif t.source.role == "ps":
                part = load.prefetched if shard.name in chunks else load.pull
            else:
                part = load.after
                if t.destination.role == "ps":
                    paths.load(load.pushes, t.source, t.destination, t.nbytes)
            paths.load(part, t.source, t.destination, t.nbytes)
        if on_chief and isinstance(sync, PSSync):
            # the shard's mean comes to the chief and its new value goes back, between the pushes
            # and the release (the optimizer's slots too, which this does not count)
            nbytes = math.prod(max(d, 1) for d in shape) * dtype_itemsize(var.dtype)
            paths.load(load.on_chief, ps(sync.ps_task), worker(0), nbytes)
            paths.load(load.on_chief, worker(0), ps(sync.ps_task), nbytes)
    return load


# ---------------------------------------------------------------------------------------------
# Step time


@dataclass(frozen=True)
class StepTime:
    """A step's predicted time and its parts (seconds), and the busiest resource of each transfer phase."""

    step: float
    compute: float
    pull: float  # bandwidth part of the synchronous reads, with `pull_cpu`
    after: float  # bandwidth part of pushes and collectives, with `after_cpu`
    latency: float  # message latencies on the critical path
    overhead: float  # per-variable and per-PS-task overheads
    overlapped: float  # what the links need for all of the step's bytes, with overlapped latencies
    on_chief: float  # TF2 mode's chief-side updates of split variables, after the pushes
    pull_resource: int
    after_resource: int
    all_resource: int
    pull_cpu: float = 0.0  # the reads' work on CPUs shared by the hosts (`Paths.cpu_seconds`), part of `pull`
    after_cpu: float = 0.0  # the pushes' and collectives' work on shared CPUs, part of `after`
    cpu_work: float = 0.0  # every process's CPU work over CPUs the hosts share (`StepCost.cpu_work_s`)

    @property
    def critical(self) -> float:
        return self.pull + self.compute + self.after + self.on_chief + self.latency + self.overhead


def _busiest(bytes_by_resource: np.ndarray, paths: Paths, c: Coefficients, burst: np.ndarray) -> tuple[float, int]:
    seconds = paths.phase_seconds(bytes_by_resource, c, burst)
    i = int(np.argmax(seconds))
    return float(seconds[i]), i


@dataclass(frozen=True)
class StepCost:
    """Everything of a step's prediction that does not depend on the coefficients: the fit and
    Auto evaluate it many times with different coefficients or loads."""

    paths: Paths
    load: Load
    compute_s: float  # the profile's compute time, scaled to the per-replica batch
    # whether the optimizer's own updates read state its finish step changes: a mixed step with
    # synchronous PS variables then meets in one more barrier (optimizer_state.py)
    own_updates_barrier: bool

    def time(self, c: Coefficients) -> StepTime:
        paths, load = self.paths, self.load
        slower = paths.cpu_contention  # the CPU-bound parts, on a machine shared by more workers than CPUs
        alone = self.compute_s * c.compute_factor  # one worker's compute with the CPUs to itself
        compute = alone * slower
        latency = self._latency(c)
        # the per-PS-task term is the sum over the workers already (`Coefficients.ps_task_overhead_s`):
        # not slowed by the contention, which would count the workers sharing the CPUs twice
        overhead = (slower * (load.pieces * c.variable_overhead_s + load.accumulators * c.ps_variable_overhead_s)
                    + sum(ps_task_call_s(paths, p, c) for p in load.sync_ps))
        # token buckets: a resource idle after compute (no pushes or collectives on it) starts the
        # next step's reads full; one busy then refills in the step's tail, its latencies and
        # overheads, in which no bytes move. The pushes and collectives find what the compute (and
        # the reads, if the resource had none) let refill; the overlapped traffic of the whole
        # step, one bucket. The phases' links here; their CPU work on shared CPUs is added to each
        # at the end (`Paths.cpu_seconds`).
        off = paths.off_cpus
        reads, later = off(load.reads), (off(load.prefetched) if load.prefetches else paths.zeros())
        after_compute = off(load.after) + later
        read_seconds = paths.phase_seconds(reads, c, np.where(after_compute > 0, paths.refilled(latency + overhead),
                                                              paths.burst))
        pull_at = int(np.argmax(read_seconds))
        pull = float(read_seconds[pull_at])
        after_idle = compute + np.where(reads > 0, 0.0, pull)
        refilled = paths.refilled(after_idle)
        after, after_at = _busiest(after_compute, paths, c, refilled)
        if load.prefetches:
            after += chunk_pipeline_fill(_busiest(off(load.after), paths, c, refilled)[0],
                                         _busiest(later, paths, c, refilled)[0], load.chunks)
        served, in_turn, others = paths.served_in_turn(reads, read_seconds)
        k = round(served)
        if k > 1 and in_turn > 0:
            # each worker's own timeline: the busiest sender of the reads serves the workers one
            # after another, and each computes as soon as its own reads are in, while the later
            # ones still read (the rest of the workers, with the other senders' phase, at the
            # latest); on CPUs shared by more workers than CPUs, those computing at once share
            # them (`compute_ends`), so the last one computes beside fewer than all. The
            # collectives wait for the last worker.
            n = paths.num_workers
            ready = reads_in(pull, k, others)[:n]
            starts = ready + [others * pull] * (n - len(ready))
            ends = compute_ends(starts, alone, paths.cpus)
            compute -= in_turn * (compute - (max(ends) - pull))
            if load.pushes.any():
                # each pushes as soon as it has computed, while the later ones still read or
                # compute. What is left after the last worker's compute: the collectives and
                # that worker's share of the pushes at least, and no less than the reads and the
                # rest together on any resource both load (a direction
                # carrying the other's reverse share); never more than the phases one after the other
                # the pushes' part of the phase: what it takes with them less what it takes without them
                # (the token bucket passes its bytes once per phase, not once per part of it)
                pushed = off(load.pushes)
                pushes = after - _busiest(after_compute - pushed, paths, c, refilled)[0]
                tail = _busiest(after_compute - pushed * (served - 1) / served, paths, c, refilled)[0]
                together = _busiest(reads + after_compute, paths, c, paths.burst)[0]
                after = min(after, max(after - workers_in_turn_overlap(pushes, ends[:len(ready)], in_turn), tail,
                                       together - pull))
        pull_cpu = paths.cpu_seconds(load.reads, c)
        after_cpu = paths.cpu_seconds(load.after + (load.prefetched if load.prefetches else 0.0), c)
        pull += pull_cpu
        after += after_cpu
        on_chief = (_busiest(off(load.on_chief), paths, c, paths.zeros())[0] + paths.cpu_seconds(load.on_chief, c)
                    if load.on_chief.any() else 0.0)
        # traffic overlapped with the rest of the step (stale PS variables) shares the CPUs beside
        # the links: the step is at least what the busier of them needs for every byte (the CPUs
        # as in each phase, `Paths.cpu_seconds`)
        overlapped, all_at = _busiest(off(load.every), paths, c, paths.burst)
        every_cpu = paths.cpu_seconds(load.every, c)
        if paths.cpu_resource is not None and every_cpu > overlapped:
            overlapped, all_at = every_cpu, paths.cpu_resource
        if load.stale_ps:
            worst = max(paths.ps_latency[p] for p in load.stale_ps)
            overlapped += 4 * (worst + c.message_latency_s * slower)
        critical = pull + compute + after + on_chief + latency + overhead
        work = self.cpu_work_s(alone, c)
        return StepTime(max(critical, overlapped, work), compute, pull, after, latency, overhead, overlapped,
                        on_chief, pull_at, after_at, all_at, pull_cpu, after_cpu, work)

    def collective_ops(self) -> int:
        """The collective ops each worker runs a step: one per all-reduce group, three per sparse
        piece all-gathered (its counts, indices and values: runtime/kernels/allreduce_sync.py), and
        the barriers of a mixed step (`barriers`)."""
        load = self.load
        if self.paths.num_workers == 1:
            return 0
        return len(load.dense_groups) + 3 * load.sparse_collectives + self.barriers()

    def barriers(self) -> int:
        """The collective barriers that order a step of several workers mixing PS variables and
        collectives (runtime/kernels/step_order.py; not the PS token queues): one that ends the step
        after every worker's PS work, and, with synchronous PS variables and an optimizer whose own
        updates read state its finish changes (Adam), one after every worker's own updates (after
        the all-reduces), which the chief's finish waits for (gradient_sync.py). 0 for any other step."""
        load = self.load
        if self.paths.num_workers == 1 or not (load.sync_ps or load.stale_ps) or load.collectives == 0:
            return 0
        return 1 + (bool(load.sync_ps) and self.own_updates_barrier)

    def cpu_work_s(self, alone: float, c: Coefficients) -> float:
        """The seconds a step takes at least on hosts that share one machine's CPUs, however its
        parts overlap (0 on hosts with CPUs of their own): every worker's CPU work over the CPUs,
        that is its compute (`alone`), its collectives (COLLECTIVE_STEP_CPU_S for having any,
        COLLECTIVE_OP_CPU_S each), its call on each synchronous PS task (PS_CALL_CPU_S, the
        worker's and the task's) and each synchronous PS piece's read and update
        (PS_SPARSE_PIECE_CPU_S, PS_DENSE_PIECE_CPU_S), and the step's bytes between hosts at κ.
        All of it over all the CPUs, the bytes' part too: a sum of CPU seconds over the CPUs is a
        bound however the work is spread. That the bytes' part also runs on one CPU a host at most
        (the busiest host's over its one CPU, an incast) is the other bound, `Paths.cpu_seconds` of
        every byte, which `time` takes beside this one (the overlapped traffic's); adding the two
        would count the compute on CPUs the stacks cannot use. At 1 Gbit/s a step of few bytes is
        this work (docs/cost-model.md, "ncf at 1 Gbit/s: the CPUs set the step")."""
        paths, load = self.paths, self.load
        if paths.cpus is None:
            return 0.0
        ops = self.collective_ops()
        collectives = COLLECTIVE_STEP_CPU_S + ops * COLLECTIVE_OP_CPU_S if ops else 0.0
        sparse = load.sparse_sync_ps
        dense = sum(load.sync_ps.values()) - sparse
        ps_calls = len(load.sync_ps) * PS_CALL_CPU_S + sparse * PS_SPARSE_PIECE_CPU_S + dense * PS_DENSE_PIECE_CPU_S
        stack = paths.through_cpus(load.every) / c.stack_bytes_per_cpu_s
        return (paths.num_workers * (alone + collectives + ps_calls) + stack) / paths.cpus

    def _latency(self, c: Coefficients) -> float:
        """The message latencies on the step's critical path."""
        paths, load = self.paths, self.load
        n = paths.num_workers
        collectives = load.collectives
        # a step of several workers mixing PS variables and collectives is ordered by collective
        # barriers (`barriers`), each a one-number all-gather of N-1 ring steps
        # (Collectives.barrier); without the own-updates one, the all-reduced updates run beside
        # the end barrier
        mixed = self.barriers() > 0
        alpha = c.message_latency_s * paths.cpu_contention
        one_collective = 2 * (n - 1) * (paths.ring_latency + alpha) if n > 1 else 0.0
        barrier = (n - 1) * (paths.ring_latency + alpha) if mixed else 0.0
        read_ps = ps_after = 0.0
        if load.sync_ps:
            one_way = max(paths.ps_latency[p] for p in load.sync_ps) + alpha
            read_ps = 2 * one_way  # the read's request and reply
            # the push reaches the PS and the chief's apply reports back; with several workers and
            # no collectives, the chief's release reaches PS 0 and the workers' token comes back
            # from it (a job of one worker has no token or release: gradient_sync.py)
            ps_after = (4 if n > 1 and not mixed else 2) * one_way
            if mixed and not self.own_updates_barrier:
                # the all-reduced variables' updates run beside the end barrier, which waits for
                # the PS part only (gradient_sync.py, `beside`): the barrier follows the PS part
                # while the collectives still run, and the step ends with the later of the two
                return read_ps + max(ps_after + barrier, collectives * one_collective)
            # with the own-updates barrier (Adam), the collectives and that barrier precede the
            # end barrier, which waits for both the PS part and them: a hybrid pays the sum
            return read_ps + max(ps_after, collectives * one_collective + barrier) + barrier
        # only stale or asynchronous PS variables beside the collectives: the end barrier waits
        # for every worker's whole step, the all-reduced updates among it
        return collectives * one_collective + barrier


def ps_task_call_s(paths: Paths, task: int, c: Coefficients) -> float:
    """What synchronous PS task `task` adds to a step for being in it: o_task per worker
    (`Coefficients.ps_task_overhead_s`, the sum over the workers), except for a task that shares a
    machine of known CPUs (NetworkFacts.shared_cpus) with its one worker on one host, whose call
    was measured there: ONE_HOST_TASK_CALL_S. There every hand-off between the worker's and the
    task's threads (the subgraph's call, its executor, the completion) waits for one of the CPUs
    that the other process's threads also want; o_task, fitted on 2-host runs, does not hold it."""
    at = paths.task_host[ps(task)]
    if paths.shared_cpus is not None and paths.num_workers == 1 and paths.task_host[worker(0)] == at:
        return ONE_HOST_TASK_CALL_S
    return paths.num_workers * c.ps_task_overhead_s


def reads_in(pulls_s: float, served: int, others: float = 0.0) -> list[float]:
    """When each of the `served` workers that the reads' busiest sender serves one after another
    (`Paths.served_in_turn`) has its reads: worker j at r_j = max(j·a, others·pulls_s), a =
    pulls_s / k a turn, `others` the other senders' share of the phase (their reads end in their
    own order: no worker's are in before that share, at the latest)."""
    a = pulls_s / served
    return [max(j * a, others * pulls_s) for j in range(1, served + 1)]


def compute_ends(starts: Sequence[float], alone_s: float, cpus: float | None) -> list[float]:
    """When each worker's compute ends, the workers starting at `starts` and each needing
    `alone_s` of one CPU: on separate machines (`cpus` None) alone_s after its start; on one
    machine's `cpus` CPUs shared by those computing at once (processor sharing: each at most one
    CPU, min(1, cpus / computing) each). All starting together, the last ends at max(1, n /
    cpus)·alone_s, the contention the model charges every worker's compute."""
    if cpus is None:
        return [s + alone_s for s in starts]
    left = [alone_s] * len(starts)
    ends = [math.inf] * len(starts)
    now = min(starts, default=0.0)
    while math.inf in ends:
        running = [i for i, s in enumerate(starts) if s <= now and ends[i] == math.inf]
        rate = min(1.0, cpus / len(running)) if running else 0.0
        step = min([left[i] / rate for i in running] + [s - now for s in starts if s > now])
        now += step
        for i in running:
            left[i] -= step * rate
            if left[i] <= 1e-9 * alone_s:
                ends[i] = now
    return ends


def workers_in_turn_overlap(pushes_s: float, ready: Sequence[float], in_turn: float) -> float:
    """What the pushes save when the workers served in turn push each as soon as it is `ready`
    (its compute's end, in the order served) and the pushes queue on their binding resource, b =
    pushes_s / k each: the last push ends max_j (ready_j + (k - j + 1)·b), max_j (ready_j + (k -
    j + 1)·b) − ready_k after the last worker's, where the phases one after the other push all k·b
    then: the difference, of which the share `in_turn` of the reads the sender serves in turn.
    With the compute the same for all (ready_j = r_j + compute, `reads_in`) and one sender:
    (k - 1)·min(a, b), the two-stage flow shop (k - 1)·max(a, b) + a + b against k·a + k·b; two
    senders alike (every read in at the phase's end): 0. One worker served (2 hosts; a receiver's
    own side binding) saves nothing."""
    k = len(ready)
    if k <= 1:
        return 0.0
    b = pushes_s / k
    left = max(r + (k - j) * b for j, r in enumerate(ready)) - max(ready)
    return in_turn * max(0.0, pushes_s - left)


def chunk_pipeline_fill(pushes_s: float, pulls_s: float, chunks: Counter) -> float:
    """What a step's chunk pipeline (PS chunks pushed in order and pulled back as each is applied,
    runtime/kernels/ps_prefetch.py) takes beyond its pushes and pulls run at once: a chunk's pull
    starts when that chunk's push is in, so the first chunk crosses one way before anything comes
    back, and the last comes back after every push is in. With C equal chunks whose pushes take
    `pushes_s` in all and pulls `pulls_s`, the two-stage pipeline takes (C - 1)·max(a, b) + a + b
    for a chunk's a = pushes_s / C and b = pulls_s / C, that is max(pushes_s, pulls_s) +
    min(pushes_s, pulls_s) / C. Several chunked variables push side by side (each two chunks in
    flight, ps_sync.ps_aggregations), so their first chunks arrive together: C is then the
    chunks per variable, on average."""
    per_variable = sum(chunks.values()) / len(chunks)
    return min(pushes_s, pulls_s) / per_variable


def compute_seconds(strategy: Strategy, profile: ModelProfile) -> float:
    """The profile's compute time at the slowest worker's per-replica batch: a worker's replicas
    split its batch (the first ones one example more) and run at the same time."""
    batch = profile.batch_size
    replicas = [len(strategy.replicas_of(w)) or 1 for w in range(strategy.num_workers)]
    if batch is None:
        return profile.compute_s / min(replicas)
    return profile.compute_s * max(math.ceil(batch / r) for r in replicas) / batch


def step_cost(strategy: Strategy, profile: ModelProfile, spec: ClusterSpec, network: NetworkFacts) -> StepCost:
    """The coefficient-free part of a prediction (see `StepCost`)."""
    _check_matches(strategy, profile, spec)
    paths = Paths.of(spec, network)
    load = Load.empty(paths)
    for var in strategy.variables:
        load.add(variable_load(var, profile, paths))
    return StepCost(paths, load, compute_seconds(strategy, profile), updates_read_step_state(profile.graph))


def _check_matches(strategy: Strategy, profile: ModelProfile, spec: ClusterSpec) -> None:
    if profile.graph.fingerprint != strategy.fingerprint:
        raise ValueError(f"the profile is of graph {profile.graph.fingerprint}, the strategy of {strategy.fingerprint}")
    if (strategy.num_workers, strategy.num_ps) != (spec.num_workers, spec.num_ps):
        raise ValueError(f"the strategy is for {strategy.num_workers} worker(s) and {strategy.num_ps} PS, "
                         f"the spec has {spec.num_workers} and {spec.num_ps}")


# ---------------------------------------------------------------------------------------------
# Prediction


def predict(
    strategy: Strategy,
    profile: ModelProfile,
    spec: ClusterSpec,
    network: NetworkFacts,
    coefficients: Coefficients | None = None,
) -> Prediction:
    """The predicted time per step of `strategy` on `spec`, bytes per node, the busiest path, what
    bounds the step and each variable's share of the synchronization time."""
    c = coefficients or Coefficients.analytical()
    cost = step_cost(strategy, profile, spec, network)
    t = cost.time(c)
    paths, load = cost.paths, cost.load
    every = load.every
    busiest = _busiest_path(paths, every)
    batch = profile.batch_size
    return Prediction(
        builder=strategy.builder,
        step_s=t.step,
        compute_s=t.compute,
        examples_per_s=batch * strategy.num_workers / t.step if batch is not None else None,
        node_bytes={
            h: NodeBytes(sent=float(every[paths.index["sent", h, ""]]),
                         received=float(every[paths.index["received", h, ""]]))
            for h in paths.hosts
        },
        busiest_link=paths.names[busiest] if busiest is not None else "none",
        busiest_link_bytes=float(every[busiest]) if busiest is not None else 0.0,
        bound=_bound(t, paths, load),
        variable_share=variable_shares(strategy.variables, profile, paths, t, c),
    )


def _busiest_path(paths: Paths, every: np.ndarray) -> int | None:
    """The path between two hosts carrying the most bytes (first in host order on ties); None when
    nothing crosses between hosts."""
    pairs = [i for (kind, _, _), i in paths.index.items() if kind == "pair"]
    if not pairs or max(every[i] for i in pairs) <= 0:
        return None
    return max(pairs, key=lambda i: (every[i], -i))


def _bound(t: StepTime, paths: Paths, load: Load) -> str:
    """What bounds the step: every process's CPU work on shared CPUs (`StepTime.cpu_work`), the
    overlapped traffic's busiest resource, `compute`, the busiest resource of the largest transfer
    part and whose traffic it carries, or latency and per-variable overhead."""
    if t.cpu_work > max(t.critical, t.overlapped):
        return "the machine's CPUs (every process's work)"
    if t.overlapped > t.critical:
        return f"network: {paths.names[t.all_resource]} (overlapped traffic)"
    parts = {
        "compute": t.compute,
        "pull": t.pull,
        "after": t.after,
        "latency": t.latency + t.overhead,
    }
    top = max(parts, key=lambda k: parts[k])
    if top == "compute":
        return "compute"
    if top == "latency":
        return "latency and per-variable overhead"
    if top == "pull":
        kind, at, cpu = "PS reads", t.pull_resource, t.pull_cpu
    else:
        kind = "PS pushes and all-reduce" if load.sync_ps and load.collectives else (
            "PS pushes and chunk pulls" if load.prefetches else "PS pushes" if load.sync_ps else "all-reduce ring")
        at, cpu = t.after_resource, t.after_cpu
    if cpu > parts[top] - cpu:  # more of the phase on the shared CPUs than on its busiest link
        return f"the machine's CPUs ({kind})"
    return f"network: {paths.names[at]} ({kind})"


def variable_shares(
    variables: Sequence[VariablePlan], profile: ModelProfile, paths: Paths, t: StepTime, c: Coefficients
) -> dict[str, float]:
    """Each variable's share of the step's synchronization time: its seconds on the busiest resource
    of each transfer part (its bytes there and its reverse-traffic share of that link's other
    direction, over the effective capacity; on shared CPUs, its bytes' CPU time, which adds to
    each phase), its per-variable overheads (a shared accumulator's
    split over the pieces sharing it), each PS task's overhead split over the synchronous pieces
    on that task, and the latencies split evenly over the
    synchronous pieces (variables or shards); normalized to sum to 1 (all 0 when nothing is
    synchronized)."""
    loads = [variable_load(v, profile, paths) for v in variables]
    total = Load.empty(paths)
    for ld in loads:
        total.add(ld)
    chunks_at = t.after_resource if total.prefetches else t.pull_resource
    synchronous = [ld.pieces - sum(ld.stale_ps.values()) for ld in loads]
    latency_per_piece = t.latency / sum(synchronous) if sum(synchronous) else 0.0
    pieces_on_task = sum((ld.sync_ps for ld in loads), Counter())
    sharing = sum((ld.shared_accumulators for ld in loads), Counter())
    slower = paths.cpu_contention
    raw = [
        float(paths.seconds(ld.pull, c)[t.pull_resource] + paths.seconds(ld.after, c)[t.after_resource]
              + paths.seconds(ld.prefetched, c)[chunks_at]
              + paths.cpu_seconds(ld.pull + ld.after + ld.prefetched + ld.on_chief, c)
              + paths.seconds(ld.overlapped, c)[t.all_resource]
              + float(np.max(paths.seconds(paths.off_cpus(ld.on_chief), c), initial=0.0))
              + slower * (ld.pieces * c.variable_overhead_s + ld.own_accumulators * c.ps_variable_overhead_s
                          + sum(c.ps_variable_overhead_s * k / sharing[key] for key, k in ld.shared_accumulators.items()))
              + sum(ps_task_call_s(paths, task, c) * k / pieces_on_task[task] for task, k in ld.sync_ps.items())
              + pieces * latency_per_piece)
        for ld, pieces in zip(loads, synchronous, strict=True)
    ]
    whole = sum(raw)
    return {v.name: (s / whole if whole > 0 else 0.0) for v, s in zip(variables, raw, strict=True)}
