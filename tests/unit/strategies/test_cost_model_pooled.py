"""Tables whose lookups are pooled over their bags on the PS (VariableInfo.pooled, PSSync.pool_bags):
the bytes the wire bound and the cost model count for them, against hand computations."""

from __future__ import annotations

import pytest

from adrun.graph_item import GraphItem, PooledBags
from adrun.placement import ps, replica_devices, worker
from adrun.spec import ClusterSpec, Node
from adrun.strategies.cost_model import pooled_bags_of, predict
from adrun.strategies.document import AllReduceSync, Partition, PSSync
from adrun.strategies.wire_bound import Transfer, pools_bags, step_transfers
from tests.support.cost_facts import (
    BANDWIDTH_ONLY, EMBED_HEAD, embed_graph, hosts_spec, network, plan, planned, profile, var,
)

# the embed workload at 4 hosts (1 worker + 1 PS each): 256 bags of 32 uniform ids a step, ~8,160
# distinct of 1,000,000 rows, so 2,040 in each quarter of the table
ROWS, SHARD_ROWS, ROW = 8160, 2040, 32 * 4
SUMS = 256 * ROW  # a shard's per-example partial sums, and d_sum: [256, 32] float32
HEAD_RING = sum(-(-2 * 3 * 4 * (s[0] * (s[1] if len(s) > 1 else 1)) // 4) for _, s in EMBED_HEAD)


def embed_plan(graph: GraphItem, **options):
    """Auto's plan of the embed workload at 4 hosts (bench/RESULTS-cluster-embed-4h-costmodel.md):
    the table cut into 4 shards on the 4 PS tasks, the head all-reduced in one group."""
    spec = hosts_spec(4)
    table, *head = graph.trainable_with_grads()
    shards = Partition(axis=0, shards=[PSSync(ps_task=i, **options) for i in range(4)])
    return spec, plan(graph, spec, [planned(table, partition=shards),
                                    *(planned(v, sync=AllReduceSync(group=0)) for v in head)])


def predicted(graph: GraphItem, **options):
    spec, strategy = embed_plan(graph, **options)
    return predict(strategy, profile(graph, 0.0055, {"embedding": ROWS}), spec, network(spec, 12.5e6, 1e-4))


def test_the_embed_workload_at_4_hosts_sends_partial_sums_and_d_sum_not_rows():
    """Per host and step: to the 3 other workers, its shard's rows (today) or partial sums
    (pooled); to the 3 other PS tasks, the summed gradient rows with their ids (today) or the
    ids, their 2,048 occurrences and d_sum (pooled); the head's ring either way."""
    assert HEAD_RING == 1_680_390
    rows = 3 * SHARD_ROWS * ROW + 3 * SHARD_ROWS * (ROW + 8) + HEAD_RING
    pooled = 3 * SUMS + 3 * (SHARD_ROWS * 8 + 2048 * 8 + SUMS) + HEAD_RING
    assert (rows, pooled) == (3_296_070, 1_975_110)
    today = predicted(embed_graph(pooled=False))
    now = predicted(embed_graph())
    for host in today.node_bytes:
        assert (today.node_bytes[host].sent, today.node_bytes[host].received) == (rows, rows)
        assert (now.node_bytes[host].sent, now.node_bytes[host].received) == (pooled, pooled)
    assert now.step_s < today.step_s


def test_pool_bags_false_gives_todays_numbers_exactly():
    graph = embed_graph()
    off = predicted(graph, pool_bags=False)
    assert off == predicted(embed_graph(pooled=False))
    assert off.node_bytes["10.0.0.1"].sent == 3_296_070


EMB = var("emb", [1000, 8], "sparse")


def bags(examples: int | None = 10, ids: int | None = 40) -> dict[str, PooledBags]:
    return {"emb": PooledBags(examples=examples, ids=ids)}


def emb_plan(shards: list[PSSync | AllReduceSync], workers: int = 2):
    graph = GraphItem(batch_size=10, variables=[EMB])
    spec = hosts_spec(workers, ps=2)
    return plan(graph, spec, [planned(EMB, partition=Partition(axis=0, shards=shards))])


def test_d_sum_goes_once_to_each_ps_task_and_sums_come_from_every_shard():
    """Three shards, two on ps0: d_sum (10 x 8 floats) goes to ps0 with its first shard only;
    worker 1 touched nothing of shard 2, which still sends it its sums (zeros: the runtime's
    segment sum of [B, dim] runs for every shard every step). Occurrences: worker 0's 40 ids
    over its 4 + 2 + 2 distinct rows, 20 + 10 + 10; worker 1's over 4 + 4 + 0, 20 + 20 + 0."""
    strategy = emb_plan([PSSync(ps_task=0), PSSync(ps_task=1), PSSync(ps_task=0)])
    rows = {"emb/part_0": [4, 4], "emb/part_1": [2, 4], "emb/part_2": [2, 0]}
    sums = 10 * 8 * 4
    assert [(t.source, t.destination, t.nbytes) for t in step_transfers(strategy, rows, bags())] == [
        (ps(0), worker(0), sums), (worker(0), ps(0), 4 * 8 + 20 * 8 + sums),
        (ps(0), worker(1), sums), (worker(1), ps(0), 4 * 8 + 20 * 8 + sums),
        (ps(1), worker(0), sums), (worker(0), ps(1), 2 * 8 + 10 * 8 + sums),
        (ps(1), worker(1), sums), (worker(1), ps(1), 4 * 8 + 20 * 8 + sums),
        (ps(0), worker(0), sums), (worker(0), ps(0), 2 * 8 + 10 * 8),
        (ps(0), worker(1), sums), (worker(1), ps(0), 0),
    ]


def test_ids_the_graph_does_not_give_count_once_each_distinct_id():
    strategy = emb_plan([PSSync(ps_task=0), PSSync(ps_task=1)])
    rows = {"emb/part_0": [3, 3], "emb/part_1": [5, 5]}
    transfers = step_transfers(strategy, rows, bags(ids=None))
    assert [t.nbytes for t in transfers if t.source == worker(0)] == [3 * 16 + 320, 5 * 16 + 320]


@pytest.mark.parametrize("shards", [
    [PSSync(ps_task=0), PSSync(ps_task=1, pool_bags=False)],
    [PSSync(ps_task=0), PSSync(ps_task=1, local_proxy=True)],
    [PSSync(ps_task=0), AllReduceSync(group=0)],
])
def test_a_table_not_wholly_on_pooling_ps_tasks_moves_rows(shards):
    strategy = emb_plan(shards)
    rows = {"emb/part_0": [4, 4], "emb/part_1": [2, 4]}
    assert not pools_bags(strategy.variables[0], 2)
    assert step_transfers(strategy, rows, bags()) == step_transfers(strategy, rows)


def test_one_worker_moves_rows():
    """The runtime pools only with more than one worker (gradient_sync.poolable_shard): one
    worker's table is counted by its rows, by the bound, the cost model and Auto's note alike."""
    strategy = emb_plan([PSSync(ps_task=0), PSSync(ps_task=1)], workers=1)
    rows = {"emb/part_0": [3], "emb/part_1": [1]}
    assert not pools_bags(strategy.variables[0], 1)
    assert step_transfers(strategy, rows, bags()) == step_transfers(strategy, rows)
    assert [t.nbytes for t in step_transfers(strategy, rows, bags())] == [3 * 32, 3 * 40, 1 * 32, 1 * 40]
    graph = GraphItem(batch_size=10, variables=[EMB.model_copy(update={"pooled": PooledBags(examples=10, ids=40)})])
    assert pooled_bags_of(strategy.variables[0], profile(graph, 0.01, {"emb": 4}), 1) is None


def test_more_than_one_in_graph_replica_per_worker_moves_rows():
    """In-graph replicas copy the gathers and concatenate their gradients, which the matcher does
    not read: the table keeps its rows."""
    spec = ClusterSpec(version=1, nodes=[Node(address=f"10.0.0.{i + 1}", chief=i == 0, workers=1, ps=1, replicas=2)
                                         for i in range(2)])
    graph = GraphItem(batch_size=10, variables=[EMB.model_copy(update={"pooled": PooledBags(examples=10, ids=40)})])
    strategy = plan(graph, spec, [planned(EMB, partition=Partition(axis=0, shards=[PSSync(ps_task=0),
                                                                                   PSSync(ps_task=1)]))])
    assert replica_devices(spec) == [["CPU:0", "CPU:1"]] * 2
    rows = {"emb/part_0": [4, 4], "emb/part_1": [2, 4]}
    assert not pools_bags(strategy.variables[0], 2, replicas=2)
    assert step_transfers(strategy, rows, bags()) == step_transfers(strategy, rows)
    assert pooled_bags_of(strategy.variables[0], profile(graph, 0.01, {"emb": 8}), 2, 2) is None
    net = network(spec, 1e8)
    assert predict(strategy, profile(graph, 0.01, {"emb": 8}), spec, net, BANDWIDTH_ONLY) == predict(
        strategy, profile(graph.model_copy(update={"variables": [EMB]}), 0.01, {"emb": 8}), spec, net, BANDWIDTH_ONLY)


def test_asynchronous_and_stale_pieces_pool_too():
    for sync in (PSSync(ps_task=0, sync=False), PSSync(ps_task=0, staleness=2)):
        strategy = emb_plan([sync, PSSync(ps_task=1, sync=sync.sync, staleness=sync.staleness)])
        transfers = step_transfers(strategy, {"emb/part_0": [3, 3], "emb/part_1": [1, 1]}, bags())
        assert any("partial sums" in t.what for t in transfers) and not any("rows" in t.what for t in transfers)


def test_a_table_whose_examples_are_unknown_moves_rows():
    """Examples unknown to capture and to the profiling run's feed: counted by its rows."""
    strategy = emb_plan([PSSync(ps_task=0), PSSync(ps_task=1)])
    graph = GraphItem(batch_size=10, variables=[EMB.model_copy(update={"pooled": PooledBags(ids=None)})])
    prof = profile(graph, 0.01, {"emb": 8})
    assert pooled_bags_of(strategy.variables[0], prof, 2) is None
    known = graph.model_copy(update={"variables": [EMB.model_copy(update={"pooled": PooledBags(examples=10)})]})
    assert pooled_bags_of(strategy.variables[0], profile(known, 0.01, {"emb": 8}), 2) == PooledBags(examples=10)
    spec = hosts_spec(2, ps=2)
    rows = predict(strategy, prof, spec, network(spec, 1e8), BANDWIDTH_ONLY)
    assert rows == predict(strategy, profile(graph.model_copy(update={"variables": [EMB]}), 0.01, {"emb": 8}),
                           spec, network(spec, 1e8), BANDWIDTH_ONLY)


def test_a_transfer_names_what_it_carries():
    strategy = emb_plan([PSSync(ps_task=0), PSSync(ps_task=1)])
    first = step_transfers(strategy, {"emb/part_0": [1, 1], "emb/part_1": [1, 1]}, bags())[:2]
    assert first == [Transfer(ps(0), worker(0), 320, "emb/part_0: per-example partial sums pulled"),
                     Transfer(worker(0), ps(0), 8 + 20 * 8 + 320,
                              "emb/part_0: distinct ids and their occurrences pushed, and d_sum")]


def test_the_sums_are_one_row_per_example():
    assert PooledBags(examples=10, ids=40).sums_bytes(32) == 320
    assert PooledBags(ids=40).sums_bytes(32) is None
