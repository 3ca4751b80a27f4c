"""The cost model (strategies/cost_model.py) against hand-computed step times and bytes."""

from __future__ import annotations

from collections import Counter

import pytest

from adrun.errors import UserError
from adrun.graph_item import GraphItem
from adrun.spec import ClusterSpec, Node
from adrun.placement import ps, worker
from adrun.strategies.cost_model import (
    COLLECTIVE_OP_CPU_S, COLLECTIVE_STEP_CPU_S, ONE_HOST_TASK_CALL_S, PS_CALL_CPU_S, PS_DENSE_PIECE_CPU_S,
    PS_SPARSE_PIECE_CPU_S, Coefficients, Paths, chunk_pipeline_fill, compute_ends, distinct_rows_of, predict,
    prefetched_chunks, reads_in,
    workers_in_turn_overlap,
)
from adrun.strategies.document import AllReduceSync, Partition, PSSync
from adrun.strategies.facts import ModelProfile, NodeBytes, RowsTouched
from tests.support.cost_facts import BANDWIDTH_ONLY, hosts_spec, network, plan, planned, profile, var

B = 1e8  # bytes/s between hosts
W = var("w", [1000, 1000])  # a dense 1000 x 1000 float32 variable
M = 4_000_000  # its bytes
DENSE = GraphItem(variables=[W], batch_size=100)
EMB = var("emb", [10_000, 64], grad="sparse")
ROW = 64 * 4
SPARSE = GraphItem(variables=[EMB], batch_size=100)


def step(strategy, prof, spec, net, c=BANDWIDTH_ONLY) -> float:
    return predict(strategy, prof, spec, net, c).step_s


def test_one_ps_pulls_before_and_pushes_after_compute():
    """Worker 1 on host 2 reads w from the PS on host 1, computes, pushes its gradient: the two
    transfers follow each other; worker 0's stay on host 1."""
    spec = hosts_spec(2, ps=[1, 0])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    prediction = predict(strategy, profile(DENSE, 0.01), spec, network(spec, B), BANDWIDTH_ONLY)
    assert prediction.step_s == pytest.approx(M / B + 0.01 + M / B)
    assert prediction.compute_s == pytest.approx(0.01)
    assert prediction.examples_per_s == pytest.approx(2 * 100 / prediction.step_s)
    assert prediction.node_bytes == {"10.0.0.1": NodeBytes(sent=M, received=M), "10.0.0.2": NodeBytes(sent=M, received=M)}
    assert (prediction.busiest_link, prediction.busiest_link_bytes) == ("10.0.0.1 -> 10.0.0.2", M)


def test_synchronous_ps_pays_three_round_trips():
    """Read (request, reply), then push, the chief's apply and the release: 6 one-way latencies of
    the path plus the per-message latency each, the per-variable and PS-variable overheads once and
    the PS task's overhead once per worker (2). The read and the push cross the link in opposite
    directions but one after the other: no reverse traffic is charged."""
    spec = hosts_spec(2, ps=[1, 0])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    c = Coefficients(message_latency_s=0.0005, variable_overhead_s=0.002, ps_variable_overhead_s=0.003,
                     ps_task_overhead_s=0.004, reverse_traffic_share=0.5)
    assert step(strategy, profile(DENSE, 0.01), spec, network(spec, B, latency_s=0.001), c) == pytest.approx(
        2 * M / B + 0.01 + 6 * (0.001 + 0.0005) + 0.002 + 0.003 + 2 * 0.004)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_k_ps_hosts_apart_from_the_workers(k):
    """4 worker hosts, k PS hosts, w split evenly over the k PSs. Reads: each PS host sends M/k to
    each worker (4·M/k in all), each worker receives M/k from each PS host, a quarter of that
    host's bytes: it waits for its senders (3/4)^k of the time. Pushes: each worker sends M/k to
    each PS host, 1/k of its bytes; a PS host receives 4·M/k, waiting (1 - 1/k)^4 of the time. With
    one PS host (k = 1) every worker has one sender and the PS host's link bounds both phases."""
    spec = ClusterSpec(version=1, nodes=[
        *(Node(address=f"10.0.0.{i + 1}", chief=i == 0, workers=1) for i in range(4)),
        *(Node(address=f"10.0.1.{p + 1}", workers=0, ps=1) for p in range(k)),
    ])
    how = {"sync": PSSync(ps_task=0)} if k == 1 else {
        "partition": Partition(axis=0, shards=[PSSync(ps_task=p) for p in range(k)])}
    strategy = plan(DENSE, spec, [planned(W, **how)])
    reads = max(4 * M / (k * B), M / (B * (1 - (3 / 4) ** k)))
    pushes = max(M / B, 4 * M / (k * B * (1 - (1 - 1 / k) ** 4)))
    assert step(strategy, profile(DENSE, 0.01), spec, network(spec, B)) == pytest.approx(0.01 + reads + pushes)


def test_one_ps_per_host_moves_the_rings_bytes_all_to_all():
    """Colocated partitioned PS moves 2(N-1)/N·M per host, like ring all-reduce (BytePS), but each
    phase is an all-to-all: every host sends a third of its bytes to each other host, so each
    receiver waits for its three senders (2/3)^3 of the time and passes its bytes at 1 - (2/3)^3 =
    19/27 of the rate. The ring's receivers have one sender each and lose nothing."""
    spec = hosts_spec(4)
    ps = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=p) for p in range(4)]))])
    ring = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    prof, net = profile(DENSE, 0.01), network(spec, B)
    assert step(ps, prof, spec, net) == pytest.approx(0.01 + 2 * 3 / 4 * M / B * 27 / 19)
    assert step(ring, prof, spec, net) == pytest.approx(0.01 + 2 * 3 / 4 * M / B)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_k_flows_into_one_port_take_k_times_one_flows_time(k):
    """An incast: k workers each push M to the PS of host 1 and send nothing else, so the port
    is never idle and passes the k·M at its rate: k times one flow's time (the reads, a fan-out
    from host 1, take as long)."""
    spec = hosts_spec(k + 1, ps=[1] + [0] * k)
    graph = GraphItem(variables=[W], batch_size=100)
    strategy = plan(graph, spec, [planned(W, sync=PSSync(ps_task=0))])
    assert step(strategy, profile(graph, 0.01), spec, network(spec, B)) == pytest.approx(0.01 + 2 * k * M / B)


@pytest.mark.parametrize("k", [2, 3])
def test_workers_served_in_turn_push_while_the_later_ones_read(k):
    """The fan-out and incast above, with a sender queue that holds a whole read (M bytes): host 1
    serves the k remote workers' reads one after another, and each computes and pushes as soon as
    its own read is in, while the later ones still read. A flow shop of k workers, M / B a stage:
    (k + 1)·M / B of wire where the phases one after the other take 2k·M / B (the old model's
    figure, still the one without a known queue, above)."""
    spec = hosts_spec(k + 1, ps=[1] + [0] * k)
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    prof = profile(DENSE, 0.01)
    assert step(strategy, prof, spec, network(spec, B, queue_bytes=M)) == pytest.approx(0.01 + (k + 1) * M / B)
    assert step(strategy, prof, spec, network(spec, B)) == pytest.approx(0.01 + 2 * k * M / B)


def test_compute_ends_share_the_cpus_among_the_workers_computing_at_once():
    """Processor sharing, each worker at most one CPU. All four starting at once on 2 CPUs end
    together at twice the compute (the contention); staggered by 0.04 s with 0.1 s each: worker 0
    alone, then two, then three at 2/3 of a CPU each... (by hand: 0.11, 0.165, 0.205, 0.235);
    on machines of their own each ends its compute after its start."""
    assert compute_ends([0.0] * 4, 0.1, 2) == pytest.approx([0.2] * 4)
    assert compute_ends([0.0, 0.04, 0.08, 0.12], 0.1, 2) == pytest.approx([0.11, 0.165, 0.205, 0.235])
    assert compute_ends([0.0, 0.04, 0.08, 0.12], 0.1, None) == pytest.approx([0.1, 0.14, 0.18, 0.22])
    assert compute_ends([0.0, 0.0], 0.0, 2) == [0.0, 0.0]


def test_workers_served_in_turn_compute_beside_fewer_than_all_on_shared_cpus():
    """4 namespace hosts on 2 CPUs, w (M bytes) on host 1's PS, read by the 3 remote workers in
    turn (a = M / B each, the queue holds a read) and pushed back (b = M / B each). The workers'
    reads are in at 0, a, 2a, 3a (host 1's own at once), and with a compute of 0.06 s = 1.5·a
    never more than two compute at once: the last computes alone, 0.06 s after its reads, where
    all four computing at once would take 0.12 s. Its push and the earlier ones' (ready at 0.10,
    0.14, 0.18) leave b after it: the step is the flow shop's (k + 1)·M / B of wire plus one
    compute, 0.22 s (0.28 s with every worker's compute slowed twofold)."""
    spec = hosts_spec(4, ps=[1, 0, 0, 0])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    net = network(spec, B, queue_bytes=M).model_copy(update={"shared_cpus": 2})
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": 1e18})
    prediction = predict(strategy, profile(DENSE, 0.06), spec, net, c)
    assert prediction.step_s == pytest.approx(4 * M / B + 0.06)
    assert prediction.compute_s == pytest.approx(0.06)


def test_a_read_larger_than_the_senders_queue_is_served_in_turn_for_the_queues_share():
    """3 remote workers, a queue of a quarter of a read: a quarter of each read enters the queue
    whole and passes in turn, the rest goes side by side with the other workers' reads. The
    overlap is a quarter of the flow shop's (k - 1)/k · M·k/B = 2·M/B."""
    spec = hosts_spec(4, ps=[1, 0, 0, 0])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    assert step(strategy, profile(DENSE, 0.01), spec, network(spec, B, queue_bytes=M / 4)) == pytest.approx(
        0.01 + 6 * M / B - 0.25 * 2 * M / B)


def test_reads_from_two_senders_alike_end_in_their_own_orders():
    """Two PS hosts each send every remote worker M/2 (w in two shards on hosts 1 and 2, the
    workers on hosts 3 to 5): each worker's reads end only when both senders served it, in two
    unrelated orders, so nothing is gained: the phases as without a queue (each worker waits for
    its two senders, 1 - (2/3)^2 of the time busy; each PS host for its three, 1 - (1/2)^3). With
    the shards 3:1, host 2's phase (a third of host 1's) ends by the time host 1 has served its
    first worker: the whole queue's share (1) is served in turn, a third of the phase the earliest
    a worker's reads are in."""
    spec = ClusterSpec(version=1, nodes=[
        Node(address="10.0.0.1", chief=True, workers=0, ps=1), Node(address="10.0.0.2", workers=0, ps=1),
        *(Node(address=f"10.0.0.{i}", workers=1) for i in (3, 4, 5))])
    w = var("w", [1000, 1000])
    graph = GraphItem(variables=[w], batch_size=100)
    even = plan(graph, spec, [planned(w, partition=Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))])
    net = network(spec, B, queue_bytes=M)
    paths = Paths.of(spec, net)
    prof = profile(graph, 0.01)
    assert step(even, prof, spec, net) == pytest.approx(0.01 + M / B * 9 / 5 + 3 * M / 2 / B * 8 / 7)
    assert step(even, prof, spec, net) == pytest.approx(step(even, prof, spec, network(spec, B)))
    reads = paths.zeros()
    for host, nbytes in ((0, 3 * M / 4), (1, M / 4)):
        for w_host in (2, 3, 4):
            reads[paths.index["pair", paths.hosts[host], paths.hosts[w_host]]] += nbytes
            reads[paths.index["sent", paths.hosts[host], ""]] += nbytes
    seconds = paths.phase_seconds(reads, BANDWIDTH_ONLY, paths.zeros())
    sent_1, sent_2 = (seconds[paths.index["sent", paths.hosts[h], ""]] for h in (0, 1))
    assert sent_2 == pytest.approx(sent_1 / 3)
    assert paths.served_in_turn(reads, seconds) == pytest.approx((3, 1, 1 / 3))


def test_a_fan_outs_receivers_waiting_longer_by_their_reverse_share_leave_the_sender_binding():
    """Host 1 sends M to each of hosts 2-4, host 2 sends M/4 to hosts 3 and 4 (the item rows beside
    the user rows of ncf's Parallax). Host 2's received side waits for host 1 (busy a third of the
    time) and carries the reverse share of what it sends: a little longer than host 1's sent side,
    which still serves the three workers in turn; host 2's sent side takes M/2 plus the reverse
    share of its M received, 0.7/3 of host 1's 3M: 7/30 of the phase the earliest a worker's reads
    are in. A path
    binding instead: nothing served in turn."""
    spec = hosts_spec(4)
    paths = Paths.of(spec, network(spec, B, queue_bytes=M))
    reads = paths.zeros()
    for src, dst, nbytes in ((0, 1, M), (0, 2, M), (0, 3, M), (1, 2, M / 4), (1, 3, M / 4)):
        paths.load(reads, ps(src), worker(dst), nbytes)
    c = BANDWIDTH_ONLY.model_copy(update={"reverse_traffic_share": 0.2})
    seconds = paths.phase_seconds(reads, c, paths.zeros())
    received_2, sent_1 = paths.index["received", "10.0.0.2", ""], paths.index["sent", "10.0.0.1", ""]
    assert seconds[received_2] > seconds[sent_1]
    assert paths.served_in_turn(reads, seconds) == pytest.approx((3, 1, 7 / 30))
    seconds[paths.index["pair", "10.0.0.1", "10.0.0.2"]] = 2 * seconds[sent_1]
    assert paths.served_in_turn(reads, seconds) == (1.0, 0.0, 0.0)


def test_workers_in_turn_overlap_is_the_flow_shops_saving():
    """k workers, reads a and pushes b each: (k - 1)·max(a, b) + a + b against k·a + k·b."""
    assert workers_in_turn_overlap(0.6, reads_in(0.3, 3), 1.0) == pytest.approx(3 * 0.1 + 3 * 0.2 - (2 * 0.2 + 0.1 + 0.2))
    assert workers_in_turn_overlap(0.6, reads_in(0.3, 3), 0.5) == pytest.approx(0.1)
    assert workers_in_turn_overlap(0.6, reads_in(0.3, 1), 1.0) == 0.0


def test_the_pushes_part_of_a_phase_shared_with_the_ring_takes_its_bucket_once():
    """A PS on host 1 (w, M bytes) read by the 3 remote workers in turn, and a dense variable r of M
    bytes all-reduced: after compute host 1's received side carries the three pushes (3M) and the
    ring's 1.5M, less one token bucket X. The pushes' part of that phase is 3M/B (the phase less
    the ring's (1.5M - X)/B), a = b = M/B: the flow shop leaves the last worker's push and the
    ring, (M + 1.5M - X)/B. Taking the pushes alone, bucket off ((3M - X)/B), the old model saved
    2X/3 less."""
    spec = hosts_spec(4, ps=[1, 0, 0, 0])
    r = var("r", [1000, 1000])
    graph = GraphItem(variables=[W, r], batch_size=100)
    strategy = plan(graph, spec, [planned(W, sync=PSSync(ps_task=0)), planned(r, sync=AllReduceSync(group=0))])
    burst = M / 2
    net = network(spec, B, queue_bytes=M, burst_bytes=burst)
    assert step(strategy, profile(graph, 0.05), spec, net) == pytest.approx(
        3 * M / B + 0.05 + (M + 1.5 * M - burst) / B)


def test_a_second_sender_delays_the_first_workers_reads_not_the_whole_overlap():
    """ncf's Parallax at 4 hosts: host 1 serves three workers the user rows in turn (a = 0.1 s
    each), host 2 sends the item rows in 0.17 s in its own order, and each worker's push (b = 0.05
    s) queues on host 1's received side. The reads are in at 0.17, 0.2 and 0.3 s at the latest:
    the first two pushes end (0.27 s) before the last worker's reads are in, so only its own push
    is left, the whole flow shop's (k - 1)·b = 0.1 s saved. The old scaling by host 1's lead over
    host 2 (1 - 0.17 / 0.3) gave 0.043 s. Two senders alike (0.3 s): every read in at the end,
    nothing saved; a second sender slower than the first worker's reads by 0.25 s: the first two
    pushes run behind each other from 0.25 s, 0.025 s of the saving left."""
    assert workers_in_turn_overlap(0.15, reads_in(0.3, 3, 0.17 / 0.3), 1.0) == pytest.approx(0.1)
    assert workers_in_turn_overlap(0.15, reads_in(0.3, 3, 1.0), 1.0) == pytest.approx(0.0)
    assert workers_in_turn_overlap(0.15, reads_in(0.3, 3, 0.25 / 0.3), 1.0) == pytest.approx(0.15 - (0.25 + 0.15 - 0.3))
    assert workers_in_turn_overlap(0.15, reads_in(0.3, 3, 0.17 / 0.3), 0.5) == pytest.approx(0.05)


def test_receiving_share_of_a_port_whose_senders_also_send_elsewhere():
    """Host 3 receives from host 1 (two thirds of the bytes host 1 sends to other hosts; its 5 MB
    to its own worker stay on the host) and from host 2 (all of host 2's): host 2 always serves it,
    so it never waits. Host 2 receives a third of host 1's bytes and nothing else: busy 1/3 of the
    time. A host that receives nothing keeps its whole rate, and so does every other resource."""
    spec = hosts_spec(3)
    paths = Paths.of(spec, network(spec, B))
    load = paths.zeros()
    for src, dst, nbytes in ((0, 2, 2e6), (0, 1, 1e6), (0, 0, 5e6), (1, 2, 3e6)):
        paths.load(load, ps(src), worker(dst), nbytes)
    share = paths.receiving_share(load)
    received = [paths.index["received", h, ""] for h in paths.hosts]
    assert share[received].tolist() == pytest.approx([1.0, 1 / 3, 1.0])
    assert share[[i for i in range(len(share)) if i not in received]].tolist() == [1.0] * (len(share) - 3)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_all_reduce(n):
    """Each worker sends 2(N-1)/N·M to the next, all at once, after compute."""
    spec = hosts_spec(n, ps=0)
    strategy = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    prediction = predict(strategy, profile(DENSE, 0.01), spec, network(spec, B), BANDWIDTH_ONLY)
    sent = -(-2 * (n - 1) * M // n)
    assert prediction.step_s == pytest.approx(0.01 + sent / B)
    assert all(b == NodeBytes(sent=sent, received=sent) for b in prediction.node_bytes.values())
    assert prediction.bound == "network: 10.0.0.1 -> 10.0.0.2 (all-reduce ring)"


@pytest.mark.parametrize("share", [0.0, 0.1, 0.5])
def test_a_link_used_both_ways_at_once_carries_the_reverse_share(share):
    """The ring on two hosts sends M each way at once: each direction also carries `share` of the
    other's bytes (acknowledgements, flow control, RPC requests). A PS plan's read and push cross
    the link one after the other, each alone in its direction: unchanged."""
    spec = hosts_spec(2, ps=[1, 0])
    ring = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    ps = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    c = BANDWIDTH_ONLY.model_copy(update={"reverse_traffic_share": share})
    prof, net = profile(DENSE, 0.01), network(spec, B)
    assert step(ring, prof, spec, net, c) == pytest.approx(0.01 + (1 + share) * M / B)
    assert step(ps, prof, spec, net, c) == pytest.approx(0.01 + 2 * M / B)


def test_reverse_share_counts_on_the_hosts_sides_too():
    """Three hosts, the ring 1 -> 2 -> 3 -> 1: each pair carries one direction only, but each host
    sends M and receives M at once, on its one network interface: its sent side carries the
    share of what it receives."""
    spec = hosts_spec(3, ps=0)
    ring = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    sent = -(-2 * 2 * M // 3)
    c = BANDWIDTH_ONLY.model_copy(update={"reverse_traffic_share": 0.2})
    assert step(ring, profile(DENSE, 0.01), spec, network(spec, B), c) == pytest.approx(0.01 + 1.2 * sent / B)


@pytest.mark.parametrize("shards", [2, 4])
def test_each_synchronous_ps_piece_pays_its_overhead(shards):
    """A variable split into k PS shards pays k PS-variable overheads (and k per-variable ones); in
    an all-reduce group or with a staleness bound it pays none."""
    spec = hosts_spec(4)
    c = BANDWIDTH_ONLY.model_copy(update={"ps_variable_overhead_s": 0.003, "variable_overhead_s": 0.001})
    prof, net = profile(DENSE, 0.01), network(spec, 1e15)
    split = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=p) for p in range(shards)]))])
    ring = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    stale = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=p, staleness=1)
                                                                             for p in range(shards)]))])
    assert step(split, prof, spec, net, c) == pytest.approx(0.01 + shards * (0.003 + 0.001))
    assert step(ring, prof, spec, net, c) == pytest.approx(0.01 + 0.001)
    assert step(stale, prof, spec, net, c) == pytest.approx(0.01 + shards * 0.001)


@pytest.mark.parametrize("workers", [2, 4])
def test_each_synchronous_ps_task_in_use_pays_its_overhead_once_per_worker(workers):
    """w split into 4 shards: on 4 PS tasks the step pays 4 task overheads per worker, with all 4
    shards on one task 1 per worker (the per-piece overheads are the same in both); an all-reduced
    or stale variable pays none."""
    spec = hosts_spec(workers, ps=4 // workers)
    c = BANDWIDTH_ONLY.model_copy(update={"ps_task_overhead_s": 0.002})
    prof, net = profile(DENSE, 0.01), network(spec, 1e18, local_bytes_per_s=1e18)
    spread = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=p) for p in range(4)]))])
    one_task = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=0)] * 4))])
    ring = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    stale = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0, staleness=1))])
    assert step(spread, prof, spec, net, c) == pytest.approx(0.01 + workers * 4 * 0.002)
    assert step(one_task, prof, spec, net, c) == pytest.approx(0.01 + workers * 1 * 0.002)
    assert step(ring, prof, spec, net, c) == pytest.approx(0.01)
    assert step(stale, prof, spec, net, c) == pytest.approx(0.01)


def test_a_hybrid_step_pays_the_ps_updates_then_the_barrier_that_ends_it():
    """3 hosts, u on PS 0 and v all-reduced. One way = path latency + per-message latency (1.5 ms),
    a collective = 2(N-1) = 4 of them (6 ms), a barrier (a one-number all-gather) N-1 = 2 of them.
    PS alone: read (2) + push, apply, release by the token queues (4). Ring alone: one collective.
    Both: read (2); then, side by side, the push and the chief's apply (2) and the all-reduce
    followed by the own-updates barrier (an unrecorded optimizer counts as reading state its
    finish changes); then the barrier that ends the step, after both (runtime/kernels/step_order.py)."""
    u, v = var("u", [1000]), var("v", [1000])
    graph = GraphItem(variables=[u, v])
    spec = hosts_spec(3)
    prof, net = profile(graph, 0.01), network(spec, 1e15, latency_s=0.001)
    c = BANDWIDTH_ONLY.model_copy(update={"message_latency_s": 0.0005})
    one_way, collective, barrier = 0.0015, 4 * 0.0015, 2 * 0.0015
    ps = plan(graph, spec, [planned(u, sync=PSSync(ps_task=0)), planned(v, sync=PSSync(ps_task=0))])
    ring = plan(graph, spec, [planned(u, sync=AllReduceSync(group=0)), planned(v, sync=AllReduceSync(group=0))])
    hybrid = plan(graph, spec, [planned(u, sync=PSSync(ps_task=0)), planned(v, sync=AllReduceSync(group=0))])
    assert step(ps, prof, spec, net, c) == pytest.approx(0.01 + 6 * one_way)
    assert step(ring, prof, spec, net, c) == pytest.approx(0.01 + collective)
    assert step(hybrid, prof, spec, net, c) == pytest.approx(
        0.01 + 2 * one_way + max(2 * one_way, collective + barrier) + barrier)


def test_one_worker_with_a_ps_and_an_all_reduced_variable_has_no_barrier():
    """One worker: the runtime orders nothing (no tokens, no barrier, an all-reduce of one is
    free); the step waits for the read's request and reply, the push and the apply's report back:
    4 one-way latencies (`test_one_worker_pays_no_token_round_trip`)."""
    u, v = var("u", [1000]), var("v", [1000])
    graph = GraphItem(variables=[u, v])
    spec = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=1, ps=0),
                                         Node(address="10.0.0.2", workers=0, ps=1)])
    net = network(spec, 1e15, latency_s=0.001)
    c = BANDWIDTH_ONLY.model_copy(update={"message_latency_s": 0.0005})
    hybrid = plan(graph, spec, [planned(u, sync=PSSync(ps_task=0)), planned(v, sync=AllReduceSync(group=0))])
    assert step(hybrid, profile(graph, 0.01), spec, net, c) == pytest.approx(0.01 + 4 * 0.0015)


@pytest.mark.parametrize("workers, one_ways", [(1, 4), (2, 6)])
def test_one_worker_pays_no_token_round_trip(workers, one_ways):
    """A synchronous PS step: the read's request and reply, the push and the chief's apply reporting
    back; with several workers also the chief's release to PS 0 and the token back from it. A job
    of one worker has no token or release (runtime/kernels/gradient_sync.py): 4 one-way latencies,
    not 6."""
    spec = hosts_spec(2, workers=workers, ps=[0, 1])
    if workers == 1:
        spec = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=1, ps=0),
                                             Node(address="10.0.0.2", workers=0, ps=1)])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    c = BANDWIDTH_ONLY.model_copy(update={"message_latency_s": 0.0005})
    net = network(spec, 1e18, latency_s=0.001, local_bytes_per_s=1e18)
    assert step(strategy, profile(DENSE, 0.01), spec, net, c) == pytest.approx(0.01 + one_ways * 0.0015)


def test_a_ps_task_waits_for_its_farthest_worker_not_for_loopback():
    """A PS task with workers on its own host and on another: the step ends with the remote
    worker, so its path's latency is the one the step waits for, even when the local path's is
    larger (a loopback latency measured with the hand-off between processes, as the benchmark's
    check gives it, against delay-free links between namespaces). Only when every worker shares
    the task's host is the local path's latency the step's."""
    c = BANDWIDTH_ONLY.model_copy(update={"message_latency_s": 0.0})
    two = hosts_spec(2, ps=[1, 0])
    strategy = plan(DENSE, two, [planned(W, sync=PSSync(ps_task=0))])
    net = network(two, 1e18, latency_s=0.0, local_bytes_per_s=1e18, local_latency_s=0.001)
    assert step(strategy, profile(DENSE, 0.01), two, net, c) == pytest.approx(0.01)  # was 0.01 + 6 * 0.001
    one = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=1, ps=1)])
    alone = plan(DENSE, one, [planned(W, sync=PSSync(ps_task=0))])
    net1 = network(one, 1e18, local_bytes_per_s=1e18, local_latency_s=0.001)
    assert step(alone, profile(DENSE, 0.01), one, net1, c) == pytest.approx(0.01 + 4 * 0.001)


@pytest.mark.parametrize("shared_cpus, workers, per_task", [
    (2, 1, ONE_HOST_TASK_CALL_S),  # the benchmark's 1-host group: measured on its machine
    (None, 1, 0.002),  # a host whose CPUs the facts do not give: o_task
    (2, 2, 2 * 0.002),  # two workers on the host: o_task per worker, as fitted
])
def test_a_one_host_ps_task_on_shared_cpus_costs_its_measured_call(shared_cpus, workers, per_task):
    """A step that touches a PS task sharing a machine of few CPUs with its one worker pays the
    task's call as measured there (bench/loopback_ps_step.py --hops: 1.15-1.95 ms beyond its
    messages, the hand-offs between the two processes waiting for a CPU), not o_task; anywhere
    else o_task per worker and task, as fitted."""
    spec = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=workers, ps=1)])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    c = BANDWIDTH_ONLY.model_copy(update={"ps_task_overhead_s": 0.002})
    net = network(spec, 1e18, local_bytes_per_s=1e18).model_copy(update={"shared_cpus": shared_cpus})
    assert step(strategy, profile(DENSE, 0.01), spec, net, c) == pytest.approx(0.01 + per_task)


def test_one_worker_pays_nothing_for_its_all_reduced_variables():
    """One worker's all-reduce is no op (runtime/kernels/allreduce_sync.py): none of its pieces pays
    the per-variable overhead; a PS piece still does (its push and take run)."""
    u, v = var("u", [1000]), var("v", [1000])
    graph = GraphItem(variables=[u, v])
    spec = hosts_spec(1)
    c = BANDWIDTH_ONLY.model_copy(update={"variable_overhead_s": 0.002})
    ring = plan(graph, spec, [planned(u, sync=AllReduceSync(group=0)), planned(v, sync=AllReduceSync(group=0))])
    hybrid = plan(graph, spec, [planned(u, sync=PSSync(ps_task=0)), planned(v, sync=AllReduceSync(group=0))])
    prof, net = profile(graph, 0.01), network(spec, B)
    assert step(ring, prof, spec, net, c) == pytest.approx(0.01)
    assert step(hybrid, prof, spec, net, c) == pytest.approx(0.01 + 0.002)


def test_a_hybrid_with_stale_ps_variables_ends_with_the_barrier_only():
    """Stale PS variables leave the critical path, but the step still ends with a barrier: the
    all-reduce (2(N-1) = 4 one-way latencies), then the barrier (N-1 = 2)."""
    u, v = var("u", [1000]), var("v", [1000])
    graph = GraphItem(variables=[u, v])
    spec = hosts_spec(3)
    prof, net = profile(graph, 0.01), network(spec, 1e15, latency_s=0.001)
    c = BANDWIDTH_ONLY.model_copy(update={"message_latency_s": 0.0005})
    hybrid = plan(graph, spec, [planned(u, sync=PSSync(ps_task=0, staleness=1)), planned(v, sync=AllReduceSync(group=0))])
    assert step(hybrid, prof, spec, net, c) == pytest.approx(0.01 + (4 + 2) * 0.0015)


BUCKET = 1_000_000  # bytes a token-bucket-shaped path passes at once


@pytest.mark.parametrize("compute_s", [0.1, 0.004])
def test_a_shaped_path_passes_its_bucket_once_per_direction_and_step(compute_s):
    """The PS reads cross 1 -> 2, the pushes 2 -> 1: each direction idles for the rest of the step
    and starts its phase with a full bucket. The ring loads both directions after compute only:
    what the compute let refill (rate × compute, at most the bucket)."""
    spec = hosts_spec(2, ps=[1, 0])
    prof, net = profile(DENSE, compute_s), network(spec, B, burst_bytes=BUCKET)
    ps = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    ring = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    assert step(ps, prof, spec, net) == pytest.approx((M - BUCKET) / B + compute_s + (M - BUCKET) / B)
    assert step(ring, prof, spec, net) == pytest.approx(compute_s + (M - min(BUCKET, B * compute_s)) / B)


@pytest.mark.parametrize("o_ps, refill", [(0.0, 0.0), (0.001, 0.002 * B), (0.01, BUCKET)])
def test_a_path_busy_after_compute_refills_for_the_next_reads_in_the_steps_tail(o_ps, refill):
    """Two shards on the two hosts' PSs: both directions carry reads and pushes. The pushes find the
    bucket the compute refilled; the reads follow the previous step's pushes after the step's
    tail, its latencies and overheads (here the two shards' accumulators, 2·o_ps), in which no
    bytes move: what that refilled, at most the bucket. Without a tail, none."""
    spec = hosts_spec(2)
    split = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))])
    half = M // 2
    c = BANDWIDTH_ONLY.model_copy(update={"ps_variable_overhead_s": o_ps})
    assert step(split, profile(DENSE, 0.1), spec, network(spec, B, burst_bytes=BUCKET), c) == pytest.approx(
        (half - refill) / B + 0.1 + (half - BUCKET) / B + 2 * o_ps)


def test_every_all_reduce_group_pays_its_ring_latency():
    """2(N-1) sequential ring steps per collective, each a path latency plus the per-message one."""
    u, v = var("u", [1000]), var("v", [1000])
    graph = GraphItem(variables=[u, v])
    spec = hosts_spec(4, ps=0)
    prof, net = profile(graph, 0.01), network(spec, 1e15, latency_s=0.001)
    c = Coefficients(message_latency_s=0.0, variable_overhead_s=0.0)
    one = plan(graph, spec, [planned(u, sync=AllReduceSync(group=0)), planned(v, sync=AllReduceSync(group=0))])
    two = plan(graph, spec, [planned(u, sync=AllReduceSync(group=0)), planned(v, sync=AllReduceSync(group=1))])
    assert step(one, prof, spec, net, c) == pytest.approx(0.01 + 1 * 2 * 3 * 0.001)
    assert step(two, prof, spec, net, c) == pytest.approx(0.01 + 2 * 2 * 3 * 0.001)


def test_partitioned_sparse_moves_the_touched_rows_of_each_shard():
    """1,000 distinct rows per step, half in each shard: a worker reads 500 rows from the other
    host's PS, then pushes their ids and summed gradients (500·(R + 8))."""
    spec = hosts_spec(2)
    prof, net = profile(SPARSE, 0.01, {"emb": 1000}), network(spec, B)
    split = plan(SPARSE, spec, [planned(EMB, partition=Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))])
    whole = plan(SPARSE, spec, [planned(EMB, sync=PSSync(ps_task=0))])
    gathered = plan(SPARSE, spec, [planned(EMB, sync=AllReduceSync(group=0))])
    assert step(split, prof, spec, net) == pytest.approx(0.01 + 500 * ROW / B + 500 * (ROW + 8) / B)
    assert step(whole, prof, spec, net) == pytest.approx(0.01 + 1000 * ROW / B + 1000 * (ROW + 8) / B)
    # all-gather: each worker passes on the other's rows and ids
    assert step(gathered, prof, spec, net) == pytest.approx(0.01 + 1000 * (ROW + 8) / B)


def test_skewed_rows_load_the_hot_shard():
    """Most touched rows in the first half of the ids (a vocabulary sorted by frequency): the PS of
    shard 0 serves 90 of the 100 rows and bounds both phases."""
    spec = hosts_spec(2)
    split = plan(SPARSE, spec, [planned(EMB, partition=Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))])
    skewed = ModelProfile(graph=SPARSE, compute_s=0.01, steps_measured=10,
                          rows_touched={"emb": RowsTouched(mean=100, max=100, by_range=[90, 10])})
    assert step(split, skewed, spec, network(spec, B)) == pytest.approx(0.01 + 90 * ROW / B + 90 * (ROW + 8) / B)


def test_rows_of_shards_that_cut_the_measured_slices():
    """1,200 rows, four measured slices of 300, three shards of 400: a slice cut by a shard boundary
    counts in proportion to the part inside."""
    emb = var("emb", [1200, 8], grad="sparse")
    prof = ModelProfile(graph=GraphItem(variables=[emb]), compute_s=0.01, steps_measured=1,
                        rows_touched={"emb": RowsTouched(mean=100, max=100, by_range=[40, 30, 20, 10])})
    three = planned(emb, partition=Partition(axis=0, shards=[PSSync(ps_task=0)] * 3))
    assert distinct_rows_of(three, prof, 2) == {"emb/part_0": [50, 50], "emb/part_1": [33, 33], "emb/part_2": [17, 17]}
    assert distinct_rows_of(planned(emb, sync=PSSync(ps_task=0)), prof, 1) == {"emb": [100]}


def test_sparse_all_gather_grows_with_the_workers_and_ps_does_not():
    spec = hosts_spec(4)
    prof, net = profile(SPARSE, 0.01, {"emb": 1000}), network(spec, B)
    gathered = plan(SPARSE, spec, [planned(EMB, sync=AllReduceSync(group=0))])
    split = plan(SPARSE, spec, [planned(EMB, partition=Partition(axis=0, shards=[PSSync(ps_task=p) for p in range(4)]))])
    assert step(gathered, prof, spec, net) == pytest.approx(0.01 + 3 * 1000 * (ROW + 8) / B)
    # each host serves its 250 rows to 3 workers, then receives their pushes, each phase an
    # all-to-all at 19/27 of the rate (test_one_ps_per_host_moves_the_rings_bytes_all_to_all)
    assert step(split, prof, spec, net) == pytest.approx(
        0.01 + (3 * 250 * ROW / B + 3 * 250 * (ROW + 8) / B) * 27 / 19)


@pytest.mark.parametrize("compressor, buffer", [("none", M), ("fp16", M // 2), ("powersgd", (1000 + 1000) * 4 * 4)])
def test_compression_shrinks_the_ring(compressor, buffer):
    spec = hosts_spec(3, ps=0)
    strategy = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0, compressor=compressor, powersgd_rank=4))])
    assert step(strategy, profile(DENSE, 0.01), spec, network(spec, B)) == pytest.approx(
        0.01 + -(-2 * 2 * buffer // 3) / B)


@pytest.mark.parametrize("compute_s", [0.01, 0.5])
def test_staleness_overlaps_communication_with_compute(compute_s):
    """With a staleness bound the PS traffic runs beside compute: the step is the longer of the two
    (the links still carry the read and the push)."""
    spec = hosts_spec(2, ps=[1, 0])
    stale = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0, staleness=2))])
    assert step(stale, profile(DENSE, compute_s), spec, network(spec, B)) == pytest.approx(max(compute_s, M / B))


@pytest.mark.parametrize("chunks", [2, 4, 12])
def test_ps_chunks_are_pulled_back_while_later_chunks_are_pushed(chunks):
    """w in C chunks on the PS of host 1 (as PS and PSLoadBalancing cut it): worker 1 pushes the
    chunks in order and pulls each back once it is applied, while the next ones are still pushed.
    A two-stage pipeline of C equal chunks, M/(C·B) a stage each way: (C - 1)·M/(C·B) + 2·M/(C·B) =
    M/B + M/(C·B) after compute, where the whole variable takes M/B before and M/B after it. Bytes
    per node are the same."""
    spec = hosts_spec(2, ps=[1, 0])
    chunked = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=0)] * chunks))])
    prediction = predict(chunked, profile(DENSE, 0.01), spec, network(spec, B), BANDWIDTH_ONLY)
    assert prediction.step_s == pytest.approx(0.01 + M / B + M / (chunks * B))
    # both directions carry M after compute: the first in host order is named
    assert prediction.bound == "network: 10.0.0.1 -> 10.0.0.2 (PS pushes and chunk pulls)"
    assert prediction.node_bytes == {"10.0.0.1": NodeBytes(sent=M, received=M), "10.0.0.2": NodeBytes(sent=M, received=M)}


def test_ps_chunks_pay_the_reverse_share_of_both_directions_at_once():
    """The chunks' pushes and pulls cross the link at the same time, so each direction carries the
    reverse-traffic share of the other, as the ring does; the fill (one chunk) is charged on top."""
    spec = hosts_spec(2, ps=[1, 0])
    chunked = plan(DENSE, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=0)] * 4))])
    c = BANDWIDTH_ONLY.model_copy(update={"reverse_traffic_share": 0.1})
    assert step(chunked, profile(DENSE, 0.01), spec, network(spec, B), c) == pytest.approx(
        0.01 + 1.1 * M / B + M / (4 * B))


def test_ps_chunks_in_a_step_with_collectives_are_read_before_compute():
    """The runtime pulls chunks back only in a step that a PS token ends: beside an all-reduced
    variable they are read before compute, as whole variables are (M/B), and pushed after it with
    the ring's bytes (k each way between the two workers)."""
    b = var("b", [1000])
    graph = GraphItem(variables=[W, b], batch_size=100)
    spec = hosts_spec(2, ps=[1, 0])
    strategy = plan(graph, spec, [planned(W, partition=Partition(axis=0, shards=[PSSync(ps_task=0)] * 4)),
                                  planned(b, sync=AllReduceSync(group=0))])
    assert step(strategy, profile(graph, 0.01), spec, network(spec, B)) == pytest.approx(
        M / B + 0.01 + (M + 4000) / B)


@pytest.mark.parametrize("how, chunks", [
    ({"partition": Partition(axis=0, shards=[PSSync(ps_task=0)] * 3)}, ["w/part_0", "w/part_1", "w/part_2"]),
    # one shard per task (PartitionedPS, Auto): nothing pulled back
    ({"partition": Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)])}, []),
    # two shards share task 0, the third is alone on task 1
    ({"partition": Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=0), PSSync(ps_task=1)])},
     ["w/part_0", "w/part_1"]),
    ({"partition": Partition(axis=0, shards=[PSSync(ps_task=0, staleness=1)] * 2)}, []),
    ({"partition": Partition(axis=0, shards=[PSSync(ps_task=0, local_proxy=True)] * 2)}, []),
    ({"sync": PSSync(ps_task=0)}, []),
])
def test_which_shards_are_pulled_back_as_applied(how, chunks):
    """As the runtime's ps_prefetch.chunks: synchronous dense shards sharing their PS task."""
    assert prefetched_chunks(planned(W, **how)) == chunks


def test_chunk_pipeline_fill_is_one_chunk_of_the_shorter_stage():
    """max(A, B) + min(A, B)/C beyond the two stages at once: min(A, B)/C; several chunked variables
    push side by side, C their chunks on average."""
    assert chunk_pipeline_fill(0.3, 0.1, Counter({"w": 4})) == pytest.approx(0.1 / 4)
    assert chunk_pipeline_fill(0.1, 0.3, Counter({"w": 4})) == pytest.approx(0.1 / 4)
    assert chunk_pipeline_fill(0.2, 0.2, Counter({"w": 2, "v": 6})) == pytest.approx(0.2 / 4)


def test_local_proxy_reads_the_whole_variable():
    """A sparse variable with a local proxy: every worker reads all of it each step, the reads bound."""
    spec = hosts_spec(2, ps=[1, 0])
    strategy = plan(SPARSE, spec, [planned(EMB, sync=PSSync(ps_task=0, local_proxy=True))])
    prediction = predict(strategy, profile(SPARSE, 0.001, {"emb": 100}), spec, network(spec, B), BANDWIDTH_ONLY)
    assert prediction.step_s == pytest.approx(10_000 * ROW / B + 0.001 + 100 * (ROW + 8) / B)
    assert prediction.bound == "network: 10.0.0.1 -> 10.0.0.2 (PS reads)"


@pytest.mark.parametrize("batch, replicas, fraction", [(128, 2, 0.5), (5, 2, 3 / 5), (8, 3, 3 / 8), (None, 4, 0.25)])
def test_compute_scales_with_the_per_replica_batch(batch, replicas, fraction):
    graph = GraphItem(variables=[W], batch_size=batch)
    spec = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=1, replicas=replicas)])
    strategy = plan(graph, spec, [planned(W, sync=AllReduceSync(group=0))])
    prediction = predict(strategy, profile(graph, 0.2), spec, network(spec, B), Coefficients(compute_factor=1.5))
    assert prediction.compute_s == pytest.approx(0.2 * 1.5 * fraction)
    assert prediction.bound == "compute"


def test_one_host_uses_the_local_path_and_its_factor():
    """Two workers and a PS on one host: reads and pushes go over loopback (2M each phase)."""
    spec = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=1)])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    net = network(spec, B, local_bytes_per_s=1e9)
    prof = profile(DENSE, 0.01)
    assert step(strategy, prof, spec, net) == pytest.approx(0.01 + 2 * 2 * M / 1e9)
    halved = BANDWIDTH_ONLY.model_copy(update={"local_bandwidth_factor": 0.5})
    assert step(strategy, prof, spec, net, halved) == pytest.approx(0.01 + 2 * 2 * M / 0.5e9)
    assert predict(strategy, prof, spec, net).busiest_link == "none"


def test_variable_shares_follow_the_bytes():
    small = var("small", [1000])
    graph = GraphItem(variables=[W, small])
    spec = hosts_spec(2, ps=0)
    strategy = plan(graph, spec, [planned(W, sync=AllReduceSync(group=0)), planned(small, sync=AllReduceSync(group=0))])
    shares = predict(strategy, profile(graph, 0.01), spec, network(spec, B), BANDWIDTH_ONLY).variable_share
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["w"] == pytest.approx(M / (M + 4000))


def test_a_ps_tasks_overhead_is_shared_by_the_pieces_on_it():
    """Only the per-PS-task overhead counts (no bytes, no latency): a and b share PS 0's, c has PS 1's
    to itself."""
    a, b, c_var = var("a", [10]), var("b", [10]), var("c", [10])
    graph = GraphItem(variables=[a, b, c_var])
    spec = hosts_spec(2)
    strategy = plan(graph, spec, [planned(a, sync=PSSync(ps_task=0)), planned(b, sync=PSSync(ps_task=0)),
                                  planned(c_var, sync=PSSync(ps_task=1))])
    c = BANDWIDTH_ONLY.model_copy(update={"ps_task_overhead_s": 0.001})
    shares = predict(strategy, profile(graph, 0.01), spec, network(spec, 1e15), c).variable_share
    assert shares == pytest.approx({"a": 0.25, "b": 0.25, "c": 0.5})


def test_a_missing_path_is_named():
    spec = hosts_spec(2, ps=0)
    strategy = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    net = network(hosts_spec(1, ps=0), B)  # knows nothing of 10.0.0.2
    with pytest.raises(UserError, match=r"between 10\.0\.0\.1 and 10\.0\.0\.2"):
        predict(strategy, profile(DENSE, 0.01), spec, net)


def test_unknown_sizes_count_as_one_and_never_negative():
    """A variable whose size was unknown when the graph was built (-1) moves what its known part
    says (the lower bound), never negative bytes."""
    odd, emb = var("odd", [-1, 1000]), var("emb", [-1, 64], grad="sparse")
    graph = GraphItem(variables=[odd, emb])
    spec = hosts_spec(2, ps=[1, 0])
    strategy = plan(graph, spec, [planned(odd, sync=PSSync(ps_task=0)), planned(emb, sync=PSSync(ps_task=0))])
    prediction = predict(strategy, profile(graph, 0.01, {"emb": 50}), spec, network(spec, B), BANDWIDTH_ONLY)
    read, pushed = 1000 * 4 + 50 * ROW, 1000 * 4 + 50 * (ROW + 8)
    assert prediction.node_bytes["10.0.0.1"] == NodeBytes(sent=read, received=pushed)
    assert prediction.step_s == pytest.approx(0.01 + (read + pushed) / B)


def _on_cpus(spec, cpus):
    """The spec's hosts as namespaces of one machine with `cpus` CPUs (NetworkFacts.shared_cpus)."""
    return network(spec, B).model_copy(update={"shared_cpus": cpus})


KAPPA = 1e8  # bytes/s one CPU sends or receives between hosts, in these tests


@pytest.mark.parametrize("hosts, cpus, cpu_s", [
    (2, 2, 2 * 2 * M / (2 * KAPPA)),  # 2 workers, one CPU each: each sends and receives M
    (4, 2, 2 * 4 * 1.5 * M / (2 * KAPPA)),  # 4 hosts on 2 CPUs: each sends and receives 1.5·M
    (2, 4, 2 * 2 * M / (2 * KAPPA)),  # 4 CPUs, but a host's messages use one CPU at most
])
def test_a_rings_cpu_work_on_shared_cpus_adds_to_its_link_time(hosts, cpus, cpu_s):
    """A ring round's receive, reduce and send are the next round's input, so the CPUs' work on
    its chunks adds to the link's time rather than running beside it: compute + the ring's bytes
    on a link (2(N-1)/N·M a host) + every byte sent and received over the CPUs (one per host at
    most). The model before took the larger of link and CPUs (0.01 + 0.08 s at 2 hosts, not 0.13)."""
    spec = hosts_spec(hosts, ps=0)
    ring = plan(DENSE, spec, [planned(W, sync=AllReduceSync(group=0))])
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": KAPPA})
    prediction = predict(ring, profile(DENSE, 0.01), spec, _on_cpus(spec, cpus), c)
    compute = 0.01 * max(1, hosts / cpus)
    assert prediction.step_s == pytest.approx(compute + 2 * (hosts - 1) / hosts * M / B + cpu_s)
    assert prediction.bound == "the machine's CPUs (all-reduce ring)"


def test_ps_reads_and_pushes_on_shared_cpus_add_their_cpu_work_to_each_phase():
    """A PS phase's messages are few and large (one per variable and worker here), each written out
    before it is sent and read after it has arrived: its CPU work adds to the link time too. M
    read from host 1's PS by worker 1 and M pushed back, each byte through the CPUs twice: M / B +
    2·M / (2·κ) = 0.04 + 0.04 s a phase. On a link 4 times slower, the same CPU time on top of
    0.16 s a phase: the link bounds the step, but the CPUs still add to it."""
    spec = hosts_spec(2, ps=[1, 0])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": KAPPA})
    prediction = predict(strategy, profile(DENSE, 0.01), spec, _on_cpus(spec, 2), c)
    assert prediction.step_s == pytest.approx(0.08 + 0.01 + 0.08)
    slow_link = network(spec, B / 4).model_copy(update={"shared_cpus": 2})
    slow = predict(strategy, profile(DENSE, 0.01), spec, slow_link, c)
    assert slow.step_s == pytest.approx(0.2 + 0.01 + 0.2)
    assert slow.bound == "network: 10.0.0.1 -> 10.0.0.2 (PS reads)"


def test_an_incast_on_shared_cpus_waits_for_its_one_hosts_cpu():
    """4 hosts on 4 CPUs, one PS on host 1 read and pushed by the 3 other hosts' workers: each phase
    meets at the PS host, whose messages one CPU handles (3·M sent or received: 3·M / κ), not the 4
    CPUs the phase's 6·M through the CPUs would spread over (1.5·M / κ). Each phase: 3·M / B on
    host 1's side + 3·M / κ = 0.12 + 0.12 s."""
    spec = hosts_spec(4, ps=[1, 0, 0, 0])
    strategy = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0))])
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": KAPPA})
    prediction = predict(strategy, profile(DENSE, 0.01), spec, _on_cpus(spec, 4), c)
    assert prediction.step_s == pytest.approx(0.12 + 0.12 + 0.01 + 0.12 + 0.12)


@pytest.mark.parametrize("hosts, ps_hosts, step_s", [
    (2, [0, 1], 4 * M / (2 * KAPPA)),  # worker 1's M read and pushed: 2 CPUs of 4, one per host
    (4, [1, 0, 0, 0], 6 * M / KAPPA),  # an incast: 3·M read and 3·M pushed at host 1, its one CPU
])
def test_stale_ps_traffic_on_shared_cpus_is_bound_by_the_cpus_as_each_phase_is(hosts, ps_hosts, step_s):
    """A stale PS variable's reads and pushes run beside the step; on shared CPUs the step is at
    least their CPU work, counted as in a phase (`Paths.cpu_seconds`): not over all 4 CPUs (2 hosts:
    4·M / (4·κ), 4 hosts: 12·M / (4·κ)), which tie with the links' M / B and 3·M / B."""
    spec = hosts_spec(hosts, ps=ps_hosts)
    stale = plan(DENSE, spec, [planned(W, sync=PSSync(ps_task=0, staleness=2))])
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": KAPPA})
    prediction = predict(stale, profile(DENSE, 0.01), spec, _on_cpus(spec, 4), c)
    assert prediction.step_s == pytest.approx(step_s)
    assert prediction.bound == "network: the machine's CPUs (overlapped traffic)"


def test_variable_shares_on_shared_cpus_count_each_variables_cpu_work():
    """A ring of two variables on 2 hosts of a 2-CPU machine, each with a per-variable overhead of
    1 ms: w's share is its M on the link, + 2·M through a host's CPU (sent and received), + 1 ms;
    without the CPUs' term it would be (M / B + 1 ms) / (... + 4000 / B + 1 ms)."""
    small = var("small", [1000])
    graph = GraphItem(variables=[W, small])
    spec = hosts_spec(2, ps=0)
    strategy = plan(graph, spec, [planned(W, sync=AllReduceSync(group=0)), planned(small, sync=AllReduceSync(group=0))])
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": KAPPA, "variable_overhead_s": 0.001})
    shares = predict(strategy, profile(graph, 0.01), spec, _on_cpus(spec, 2), c).variable_share
    w_s, small_s = M / B + 2 * M / KAPPA + 0.001, 4000 / B + 2 * 4000 / KAPPA + 0.001
    assert shares["w"] == pytest.approx(w_s / (w_s + small_s))


SMALL = var("small", [100])  # a small dense variable: its bytes cost next to nothing here
MIXED = GraphItem(variables=[EMB, SMALL], batch_size=100, optimizer="GradientDescentOptimizer",
                  updates_read_step_state=False)
NO_STACK = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": 1e18})  # bytes cost the CPUs nothing


@pytest.mark.parametrize("hosts", [2, 4])
def test_a_ring_of_small_tensors_on_shared_cpus_takes_its_processes_cpu_work_over_the_cpus(hosts):
    """Every worker all-gathers emb (its counts, indices and values: 3 collective ops) and all-reduces
    `small` (1 op): on 2 shared CPUs the step is at least every worker's compute and collectives'
    CPU work over the 2 CPUs, measured per step with any collective and per op, though its bytes
    take microseconds. On machines of their own the same plan is priced as before: compute and
    bytes."""
    spec = hosts_spec(hosts, ps=0)
    ring = plan(MIXED, spec, [planned(EMB, sync=AllReduceSync(group=0)), planned(SMALL, sync=AllReduceSync(group=0))])
    prof = profile(MIXED, 0.001, {"emb": 10})
    worker_s = 0.001 + COLLECTIVE_STEP_CPU_S + 4 * COLLECTIVE_OP_CPU_S
    shared = predict(ring, prof, spec, _on_cpus(spec, 2), NO_STACK)
    assert shared.step_s == pytest.approx(hosts * worker_s / 2)
    assert shared.bound == "the machine's CPUs (every process's work)"
    alone = predict(ring, prof, spec, network(spec, B), NO_STACK)
    assert alone.step_s < 0.0011


@pytest.mark.parametrize("hosts", [2, 4])
def test_ps_calls_on_shared_cpus_cost_the_workers_and_the_tasks_cpu_work(hosts):
    """emb and `small` on host 1's PS task: each worker's step calls the task once (the worker's
    and the task's CPU of the call) and reads and updates one sparse and one dense piece there; on
    2 shared CPUs the step takes at least that work of every worker over the CPUs: n times the
    one-worker figures, which bench/loopback_ps_workers.py found to hold at n = 2 and 3 within its
    spread (docs/cost-model.md, "The PS terms at n workers")."""
    spec = hosts_spec(hosts, ps=[1] + [0] * (hosts - 1))
    strategy = plan(MIXED, spec, [planned(EMB, sync=PSSync(ps_task=0)), planned(SMALL, sync=PSSync(ps_task=0))])
    prof = profile(MIXED, 0.001, {"emb": 10})
    worker_s = 0.001 + PS_CALL_CPU_S + PS_SPARSE_PIECE_CPU_S + PS_DENSE_PIECE_CPU_S
    assert step(strategy, prof, spec, _on_cpus(spec, 2), NO_STACK) == pytest.approx(hosts * worker_s / 2)


def test_the_cpu_work_bound_counts_a_one_worker_steps_collectives_as_none():
    """A collective of one worker is no op (runtime/kernels/allreduce_sync.py): one host's ring on
    shared CPUs costs its compute, not the collectives' CPU."""
    spec = hosts_spec(1, ps=0)
    ring = plan(MIXED, spec, [planned(EMB, sync=AllReduceSync(group=0)), planned(SMALL, sync=AllReduceSync(group=0))])
    assert step(ring, profile(MIXED, 0.001, {"emb": 10}), spec, _on_cpus(spec, 2), NO_STACK) == pytest.approx(0.001)
