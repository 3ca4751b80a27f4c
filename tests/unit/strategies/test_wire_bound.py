"""The per-step lower bound of bytes on the wire, against hand-computed values (strategies/wire_bound.py)."""

from __future__ import annotations

import pytest

from adrun.graph_item import GraphItem, VariableInfo
from adrun.placement import ps as ps_task
from adrun.placement import worker
from adrun.spec import ClusterSpec, Node
from adrun.strategies import build_strategy
from adrun.strategies.document import AllReduceSync, Partition, PSSync, Strategy, VariablePlan
from adrun.strategies.wire_bound import HostTraffic, Transfer, lower_bound, step_transfers, wire_bound

# the sparse classifier of issue 13: embedding 200,000 x 64, MLP head 64 -> 256 -> 1000
CLASSIFIER = GraphItem(variables=[
    VariableInfo(name="embedding", shape=[200_000, 64], dtype="float32", trainable=True, grad="sparse"),
    VariableInfo(name="hidden/kernel", shape=[64, 256], dtype="float32", trainable=True, grad="dense"),
    VariableInfo(name="hidden/bias", shape=[256], dtype="float32", trainable=True, grad="dense"),
    VariableInfo(name="out/kernel", shape=[256, 1000], dtype="float32", trainable=True, grad="dense"),
    VariableInfo(name="out/bias", shape=[1000], dtype="float32", trainable=True, grad="dense"),
])
DENSE = (64 * 256 + 256 + 256 * 1000 + 1000) * 4  # 1,094,560 bytes of dense variables
ROW = 64 * 4


def hosts_spec(count: int, ps: int = 1) -> ClusterSpec:
    """`count` hosts 10.0.0.1.. with one worker and `ps` PS each; the first is the chief."""
    return ClusterSpec(version=1, nodes=[
        Node(address=f"10.0.0.{i + 1}", chief=i == 0, workers=1, ps=ps) for i in range(count)
    ])


def plan(variables: list[VariablePlan], workers: int, num_ps: int) -> Strategy:
    return Strategy(version=1, builder="hand", fingerprint="f", num_workers=workers, num_ps=num_ps, variables=variables)


def test_ps_load_balancing_on_two_hosts():
    """The embedding lands on ps0 (host 1), the dense head on ps1 (host 2): each worker's traffic
    with the PS on its own host stays local."""
    spec = hosts_spec(2)
    strategy = build_strategy("PSLoadBalancing", CLASSIFIER, spec)
    assert [v.sync.ps_task for v in strategy.variables] == [0, 1, 1, 1, 1]
    bound = lower_bound(strategy, {"embedding": [1500, 1400]}, spec)
    # host 1 sends w0's dense gradients to ps1 and w1's 1,400 rows; receives the dense values and
    # w1's 1,400 ids with their summed gradient rows
    host1 = HostTraffic(sent=DENSE + 1400 * ROW, received=DENSE + 1400 * (ROW + 8))
    assert bound.per_host == {"10.0.0.1": host1, "10.0.0.2": HostTraffic(host1.received, host1.sent)}
    assert bound.local_bytes == 1500 * ROW + 1500 * (ROW + 8) + 2 * DENSE


def test_one_host_keeps_everything_local():
    spec = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=2)])
    strategy = build_strategy("PSLoadBalancing", CLASSIFIER, spec)
    bound = lower_bound(strategy, {"embedding": [10, 20]}, spec)
    assert bound.per_host == {"localhost": HostTraffic(0, 0)}
    assert bound.local_bytes == 2 * 2 * DENSE + 10 * (2 * ROW + 8) + 20 * (2 * ROW + 8)


def test_sparse_ps_transfers_per_worker():
    strategy = plan([VariablePlan(name="emb", shape=[100, 4], dtype="float32", grad="sparse",
                                  sync=PSSync(ps_task=0))], workers=2, num_ps=1)
    assert step_transfers(strategy, {"emb": [3, 5]}) == [
        Transfer(ps_task(0), worker(0), 3 * 16, "emb: distinct rows pulled"),
        Transfer(worker(0), ps_task(0), 3 * 24, "emb: distinct ids and summed gradient rows pushed"),
        Transfer(ps_task(0), worker(1), 5 * 16, "emb: distinct rows pulled"),
        Transfer(worker(1), ps_task(0), 5 * 24, "emb: distinct ids and summed gradient rows pushed"),
    ]


def test_a_local_proxy_pulls_the_whole_variable():
    strategy = plan([VariablePlan(name="emb", shape=[100, 4], dtype="float32", grad="sparse",
                                  sync=PSSync(ps_task=0, local_proxy=True))], workers=1, num_ps=1)
    pulled, pushed = step_transfers(strategy, {"emb": [3]})
    assert (pulled.nbytes, pushed.nbytes) == (100 * 16, 3 * 24)


def test_shards_of_a_sparse_variable_need_their_own_row_counts():
    strategy = plan([VariablePlan(name="emb", shape=[10, 2], dtype="float64", grad="sparse", partition=Partition(
        axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))], workers=1, num_ps=2)
    with pytest.raises(ValueError, match="sparse variable 'emb/part_0': give the distinct rows"):
        step_transfers(strategy, {"emb": [4]})
    transfers = step_transfers(strategy, {"emb/part_0": [4], "emb/part_1": [1]})
    assert [(t.source, t.destination, t.nbytes) for t in transfers] == [
        (ps_task(0), worker(0), 4 * 16), (worker(0), ps_task(0), 4 * 24),
        (ps_task(1), worker(0), 1 * 16), (worker(0), ps_task(1), 1 * 24),
    ]


def test_a_row_count_per_worker():
    strategy = plan([VariablePlan(name="emb", shape=[10, 2], dtype="float32", grad="sparse",
                                  sync=PSSync(ps_task=0))], workers=2, num_ps=1)
    with pytest.raises(ValueError, match="'emb': 1 distinct-row counts for 2 worker"):
        step_transfers(strategy, {"emb": [4]})


@pytest.mark.parametrize("compressor,buffer", [("none", 1000 * 4), ("fp16", 1000 * 2), ("fp16-ef", 1000 * 2)])
def test_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_buffer(compressor, buffer):
    strategy = plan([VariablePlan(name="w", shape=[10, 100], dtype="float32", grad="dense",
                                  sync=AllReduceSync(group=0, compressor=compressor))], workers=4, num_ps=0)
    bound = lower_bound(strategy, {}, hosts_spec(4, ps=0))
    assert set(bound.per_host.values()) == {HostTraffic(2 * 3 * buffer // 4, 2 * 3 * buffer // 4)}


def test_powersgd_sends_the_factors_when_they_are_smaller():
    factored = plan([VariablePlan(name="w", shape=[256, 1000], dtype="float32", grad="dense",
                                  sync=AllReduceSync(group=0, compressor="powersgd", powersgd_rank=2))], 2, 0)
    [to_w1, _] = step_transfers(factored, {})
    assert to_w1.nbytes == (256 + 1000) * 2 * 4  # 2(N-1)/N = 1 for two workers
    vector = plan([VariablePlan(name="b", shape=[1000], dtype="float32", grad="dense",
                                sync=AllReduceSync(group=0, compressor="powersgd"))], 2, 0)
    assert step_transfers(vector, {})[0].nbytes == 4000


def test_sparse_all_gather_passes_on_all_but_the_successors_rows():
    strategy = plan([VariablePlan(name="emb", shape=[100, 64], dtype="float32", grad="sparse",
                                  sync=AllReduceSync(group=0))], workers=3, num_ps=0)
    row = ROW + 8
    assert [(t.source, t.destination, t.nbytes) for t in step_transfers(strategy, {"emb": [10, 20, 30]})] == [
        (worker(0), worker(1), (10 + 30) * row),
        (worker(1), worker(2), (10 + 20) * row),
        (worker(2), worker(0), (20 + 30) * row),
    ]


def test_colocated_partitioned_ps_equals_ring_all_reduce():
    """BytePS's observation (shared/reference/comm-cost-anchors.md §3b): with every host a worker
    and a PS holding 1/N of a dense variable, each host moves 2(N-1)/N of it, as a ring does."""
    spec = hosts_spec(4)
    shape = [1000, 4]
    sharded = plan([VariablePlan(name="w", shape=shape, dtype="float32", grad="dense", partition=Partition(
        axis=0, shards=[PSSync(ps_task=p) for p in range(4)]))], workers=4, num_ps=4)
    ring = plan([VariablePlan(name="w", shape=shape, dtype="float32", grad="dense", sync=AllReduceSync(group=0))],
                workers=4, num_ps=0)
    expected = HostTraffic(2 * 3 * 16000 // 4, 2 * 3 * 16000 // 4)
    assert set(lower_bound(sharded, {}, spec).per_host.values()) == {expected}
    assert set(lower_bound(ring, {}, spec).per_host.values()) == {expected}


def test_parallax_all_reduces_the_head_and_serves_rows_from_a_ps():
    spec = hosts_spec(2)
    strategy = build_strategy("Parallax", CLASSIFIER, spec)
    bound = lower_bound(strategy, {"embedding": [1500, 1400]}, spec)
    # the ring between two workers sends the whole dense buffer each way; w1 pulls and pushes its rows
    assert bound.per_host["10.0.0.1"] == HostTraffic(DENSE + 1400 * ROW, DENSE + 1400 * (ROW + 8))


def test_wire_bound_counts_each_transfer_once_per_side():
    bound = wire_bound([Transfer(worker(0), ps_task(0), 7, "x"), Transfer(ps_task(0), worker(1), 5, "y")],
                       {worker(0): "a", ps_task(0): "b", worker(1): "b"})
    assert bound.per_host == {"a": HostTraffic(7, 0), "b": HostTraffic(0, 7)}
    assert bound.local_bytes == 5
