"""The benchmark's lower bound (bench/cluster/lower_bound.py) judges a plan whose lookups pool on
the PS by what it sends: the captured graph's pooled facts, under the bound's own rule."""

from __future__ import annotations

from adrun.spec import ClusterSpec, Node
from adrun.strategies.document import AllReduceSync, Partition, PSSync
from bench.cluster.lower_bound import lower_bound, pooled_facts
from tests.support.cost_facts import EMBED_BATCH, EMBED_BAG, embed_graph, hosts_spec, plan, planned

SHARD_ROWS, ROW = 4080, 32 * 4  # the embed workload at 2 hosts: ~8,160 distinct rows, half in each shard


def embed_bound(hosts: int, pooled: bool) -> list[float]:
    """The table in 2 shards on 2 PS tasks, the head all-reduced: on `hosts` hosts of a worker and a
    PS each, or (1) one worker's host and a host of both PS tasks."""
    graph = embed_graph()
    spec = hosts_spec(2) if hosts == 2 else ClusterSpec(version=1, nodes=[
        Node(address="10.0.0.1", chief=True, workers=1, ps=0), Node(address="10.0.0.2", workers=0, ps=2)])
    table, *head = graph.trainable_with_grads()
    shards = Partition(axis=0, shards=[PSSync(ps_task=i) for i in range(2)])
    strategy = plan(graph, spec, [planned(table, partition=shards),
                                  *(planned(v, sync=AllReduceSync(group=0)) for v in head)])
    rows = {f"embedding/part_{i}": [SHARD_ROWS] * spec.num_workers for i in range(2)}
    sent, _ = lower_bound(strategy, spec, rows, pooled_facts(graph if pooled else embed_graph(pooled=False)))
    return sent


def test_the_captured_graphs_pooled_facts_give_the_pooled_bound():
    """2 hosts: to the other worker its shard's [256, 32] sums, to the other PS the ids, their
    4,096 occurrences and d_sum, where rows would be 4,080 rows out and 4,080 rows with ids in."""
    assert pooled_facts(embed_graph()) == {"embedding": embed_graph().variables[0].pooled}
    head = embed_bound(2, pooled=False)[0] - (SHARD_ROWS * ROW + SHARD_ROWS * (ROW + 8))
    sums = EMBED_BATCH * ROW
    assert embed_bound(2, pooled=True) == [head + sums + SHARD_ROWS * 8 + EMBED_BATCH * EMBED_BAG // 2 * 8 + sums] * 2


def test_one_worker_is_bounded_by_its_rows():
    """The runtime pools only with several workers: one worker's bound is the rows' (its ids and
    summed rows to the PS host)."""
    assert embed_bound(1, pooled=True) == embed_bound(1, pooled=False) == [2 * SHARD_ROWS * (ROW + 8), 2 * SHARD_ROWS * ROW]
