"""A worker exchanges rows with the PS tasks one host after the other, staggered
(`exchange_rounds`): the order itself, and the control dependencies that impose it in a worker's
rewritten graph, read back from the graph as data (which PS task's transfers wait for which, and
that dense reads and pushes wait for none)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
import yaml

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime import session_setup  # noqa: E402
from adrun.runtime.capture import describe_graph  # noqa: E402
from adrun.runtime.grads import GradientRecord, records_for  # noqa: E402
from adrun.runtime.kernels.exchange_rounds import _depends_on, _inputs_read, exchange_order, rows_only  # noqa: E402
from adrun.runtime.kernels.ps_sync import BATCH_BELOW_BYTES  # noqa: E402
from adrun.runtime.kernels.gradient_sync import synchronized_apply  # noqa: E402
from adrun.runtime.kernels.partitioning import partitioner_for  # noqa: E402
from adrun.spec import ClusterSpec, Node  # noqa: E402
from adrun.strategies import build_strategy  # noqa: E402
from adrun.strategies.document import dump_strategy  # noqa: E402
from adrun.task_context import TaskContext  # noqa: E402
from tests.support.exchange_waits import pull_waits, push_waits, ps_task  # noqa: E402

HOSTS = 4
VOCAB, DIM, BAG, HIDDEN = 64, 4, 3, 8


def _cluster(hosts: int, ps_per_host: int = 1) -> dict[str, list[str]]:
    """One worker and one PS task per host, as the benchmark's namespace hosts run them (or
    `ps_per_host` PS tasks: host h's are tasks h * ps_per_host onwards)."""
    return {"worker": [f"10.0.0.{h + 1}:2223" for h in range(hosts)],
            "ps": [f"10.0.0.{h + 1}:{2222 + 100 * k}" for h in range(hosts) for k in range(ps_per_host)]}


def test_each_round_pairs_every_worker_with_another_hosts_ps_task():
    orders = [exchange_order(w, _cluster(HOSTS)) for w in range(HOSTS)]
    assert orders[0] == [1, 2, 3] and orders[1] == [2, 3, 0] and orders[3] == [0, 1, 2]
    for r in range(HOSTS - 1):
        # round r is a permutation: one flow leaves and one enters each host's link
        assert sorted(order[r] for order in orders) == list(range(HOSTS))
    for w, order in enumerate(orders):
        assert w not in order  # the own host's PS task in no round: its transfers use no link


def test_only_other_hosts_tasks_and_two_workers_of_one_host_start_apart():
    cluster = {"worker": ["a:1", "a:2", "b:1"], "ps": ["a:3", "a:4", "b:2", "b:3"]}
    assert exchange_order(0, cluster) == [2, 3]
    assert exchange_order(1, cluster) == [3, 2]
    assert exchange_order(2, cluster) == [0, 1]  # b's own tasks in no round


def test_a_worker_without_a_ps_task_on_its_host_starts_after_its_index():
    cluster = {"worker": ["a:1", "b:1"], "ps": ["c:1", "d:1", "e:1"]}
    assert exchange_order(1, cluster) == [2, 0, 1]
    assert exchange_order(0, {"worker": ["a:1"]}) == []


def _model(partition_of, lookups: int = 1, hidden: int = HIDDEN):
    """An embedding looked up `lookups` times, each from ids of its own placeholder, and a dense
    layer of `hidden` units."""
    y = tf1.placeholder(tf.float32, [None, 1], name="y")

    def variable(name, shape):
        partition = partition_of(name)
        return tf1.get_variable(name, shape, partitioner=partitioner_for(partition) if partition else None)

    emb, w = variable("emb", [VOCAB, DIM]), variable("w", [DIM, hidden])
    pooled = tf.add_n([
        tf.reduce_mean(tf1.nn.embedding_lookup(emb, tf1.placeholder(tf.int64, [None, BAG], name=f"ids{i}"),
                                               partition_strategy="div"), axis=1)
        for i in range(lookups)])
    loss = tf.reduce_mean(tf.square(tf.reduce_sum(tf.matmul(pooled, w), axis=1, keepdims=True) - y))
    optimizer = tf1.train.GradientDescentOptimizer(0.1)
    pairs = optimizer.compute_gradients(loss)
    records_for(tf1.get_default_graph()).calls.append(GradientRecord(optimizer, pairs))
    return optimizer, pairs


def _worker_graph(tmp_path: Path, worker: int, lookups: int = 1, hidden: int = HIDDEN, hosts: int = HOSTS,
                  ps_per_host: int = 1, pool_bags: bool = False) -> tf.Graph:
    """Worker `worker`'s graph of a PartitionedPS plan on `hosts` hosts with one worker and
    `ps_per_host` PS tasks each, rewritten as in a job. The rounds order rows: unless `pool_bags`,
    the plan says `pool_bags: false`, so the lookup moves rows as it did before pooling."""
    with tf.Graph().as_default() as graph:
        _model(lambda name: None, lookups, hidden)
        item = describe_graph(graph)
    spec = ClusterSpec(version=1, nodes=[Node(address=f"10.0.0.{h + 1}", workers=1, ps=ps_per_host, chief=h == 0)
                                         for h in range(hosts)])
    plan = tmp_path / "plan.yml"
    dump_strategy(build_strategy("PartitionedPS", item, spec, {}), plan)
    document = yaml.safe_load(plan.read_text())
    for variable in document["variables"]:
        for sync in variable["partition"]["shards"] if variable.get("partition") else [variable["sync"]]:
            if sync["kind"] == "ps":
                sync["pool_bags"] = pool_bags
    plan.write_text(yaml.safe_dump(document))
    ctx = TaskContext(mode="run", role="worker", task_index=worker, num_workers=hosts, job_id="t",
                      cluster=_cluster(hosts, ps_per_host), strategy_file=str(plan), capture_out=None)
    with tf.Graph().as_default() as graph:
        optimizer, pairs = _model(ctx.plan.partition, lookups, hidden)
        synchronized_apply(optimizer, optimizer.apply_gradients, pairs, ctx, 0)
    session_setup.prepare_graph(graph, ctx)
    return graph


@pytest.mark.parametrize("worker", [0, 1, 3])
def test_rows_go_round_the_ps_tasks_in_the_workers_order_and_dense_transfers_at_once(tmp_path, worker):
    graph = _worker_graph(tmp_path, worker)
    order = exchange_order(worker, _cluster(HOSTS))
    chain = {task: {before} for before, task in pairwise(order)}
    assert push_waits(graph) == chain
    assert pull_waits(graph) == chain
    # the own host's PS task (task `worker`) neither waits nor is waited for: its rows cross no link
    assert worker not in chain and all(worker not in before for before in chain.values())
    # the waits sit on the rows only: the embedding's row gathers and sparse pushes of every round
    # but the first; the dense layer's shards are read and pushed at once
    gathers = [op for op in graph.get_operations() if op.type == "ResourceGather" and op.control_inputs]
    assert sorted(ps_task(op) for op in gathers) == sorted(order[1:])
    assert not [op for op in graph.get_operations() if op.type == "ReadVariableOp" and any(
        c.name.startswith("adrun_pull_arrived") for c in op.control_inputs)]
    pushed = {c.type for op in graph.get_operations() if "adrun_push_in_order" in op.name for c in op.outputs[0].consumers()}
    assert pushed == {"SparseAccumulatorApplyGradient"}
    waiting_pushes = [op for op in graph.get_operations() if op.type == "SparseAccumulatorApplyGradient"
                      and any("adrun_push_in_order" in t.op.name for t in op.inputs)]
    assert len(waiting_pushes) == HOSTS - 2  # every remote round but the first
    for push in waiting_pushes:  # the rows wait; the ids are the forward gather's, sent once a step
        ids, rows = push.inputs[2], push.inputs[3]
        assert "adrun_push_in_order" in rows.op.name and "adrun_distinct_ids" in ids.op.name


@pytest.mark.parametrize("worker", [0, 1])
def test_none_of_the_own_hosts_several_ps_tasks_waits_or_is_waited_for(tmp_path, worker):
    """3 hosts with 2 PS tasks each, every one holding an embedding shard: the worker's host's two
    tasks (2w, 2w + 1) are in no round, neither waiting nor waited for; the other hosts' four go
    round in the worker's order."""
    graph = _worker_graph(tmp_path, worker, hosts=3, ps_per_host=2)
    own = {2 * worker, 2 * worker + 1}
    gathered = {ps_task(op) for op in graph.get_operations() if op.type == "ResourceGather"}
    assert gathered == set(range(6))  # the own host's tasks hold rows too: the check below is not empty
    for waits in (pull_waits(graph), push_waits(graph)):
        in_rounds = set(waits).union(*waits.values())
        assert in_rounds == set(range(6)) - own, f"w{worker}: the PS tasks in rounds"
        order = exchange_order(worker, _cluster(3, ps_per_host=2))
        assert waits == {task: {before} for before, task in pairwise(order)}


@pytest.mark.parametrize("worker", [0, 1])
def test_a_pooled_lookup_gets_no_rounds_and_no_row_traffic(tmp_path, worker):
    """The same plan with the lookup pooled (`pool_bags` true, the default): its only row traffic
    is pooled, so nothing waits (`rows_only`); each shard's gathers read the distinct ids and are
    consumed on their PS task, and its gradient is pushed as rows formed there."""
    graph = _worker_graph(tmp_path, worker, pool_bags=True)
    assert not push_waits(graph) and not pull_waits(graph)
    assert not [op for op in graph.get_operations() if op.type == "ResourceGather" and op.control_inputs]
    pooled = [op for op in graph.get_operations() if op.type == "ResourceGather" and op.name.startswith("adrun_pooled")]
    assert sorted(ps_task(op) for op in pooled) == list(range(HOSTS))
    assert all(c.colocation_groups() == op.colocation_groups() for op in pooled for c in op.outputs[0].consumers())
    pushes = [op for op in graph.get_operations() if op.type == "SparseAccumulatorApplyGradient"]
    assert len(pushes) == HOSTS
    for push in pushes:  # the rows are formed beside the shard (segment sums of d_sum), ids sorted on the worker
        rows = push.inputs[3].op
        assert rows.type == "UnsortedSegmentSum" and rows.name.startswith("adrun_pooled_grad")
        assert rows.colocation_groups() == [f"loc:@emb/part_{ps_task(push)}".encode()]


def test_a_gather_waits_only_for_gathers_of_ids_from_the_same_inputs(tmp_path):
    """Two lookups from two placeholders: each lookup's shards go round the tasks, but neither
    waits for the other's (fetching one would then need the other's ids fed)."""
    graph = _worker_graph(tmp_path, 0, lookups=2)

    def placeholders(op: tf.Operation) -> set[str]:
        stack, seen = [op], set()
        while stack:
            current = stack.pop()
            if current.name not in seen:
                seen.add(current.name)
                stack += [t.op for t in current.inputs if not t.op.name.startswith("adrun_pull_arrived")]
        return {name for name in seen if name.startswith("ids")}

    waiting = [op for op in graph.get_operations() if op.type == "ResourceGather" and op.control_inputs]
    assert len(waiting) == 2 * (HOSTS - 2)  # per lookup, every remote round but the first
    for op in waiting:
        mine = placeholders(op)
        assert len(mine) == 1
        for arrived in op.control_inputs:
            assert placeholders(arrived.inputs[0].op) == mine


def test_no_rounds_where_large_dense_shards_travel_beside_the_rows(tmp_path):
    """A layer whose PartitionedPS shards are each BATCH_BELOW_BYTES (as the embed workload's 512 x
    512 kernel in 4 shards): every transfer goes at once, as TF sends them (the rounds would only
    add waits beside those flows)."""
    graph = _worker_graph(tmp_path, 1, hidden=BATCH_BELOW_BYTES * HOSTS // (4 * DIM))
    assert not push_waits(graph) and not pull_waits(graph)
    assert not [op for op in graph.get_operations() if op.type == "ResourceGather" and op.control_inputs]


def test_rows_only_plans(tmp_path):
    """Which builders' plans of the embed workload's shape send rows only to the PS tasks."""
    with tf.Graph().as_default() as graph:
        _model(lambda name: None, hidden=BATCH_BELOW_BYTES * HOSTS // (4 * DIM))
        item = describe_graph(graph)
    spec = ClusterSpec(version=1, nodes=[Node(address=f"10.0.0.{h + 1}", workers=1, ps=1, chief=h == 0) for h in range(HOSTS)])
    plans = {b: rows_only(build_strategy(b, item, spec, {})) for b in ("PartitionedPS", "PS", "Parallax", "AllReduce")}
    # PartitionedPS's and PS's layer pieces are large; Parallax all-reduces the layer; AllReduce uses no PS
    assert plans == {"PartitionedPS": False, "PS": False, "Parallax": True, "AllReduce": False}


def test_a_lookup_of_looked_up_ids_never_waits_for_the_one_it_reads_and_queues_count_as_inputs():
    """Ids dequeued from a queue, looked up in a table whose rows are the ids of a second lookup:
    the second gather depends on the first (a wait the other way round would be a cycle), and both
    take from the queue (a fetch made to wait for one would dequeue a batch)."""
    with tf.Graph().as_default():
        queue = tf1.FIFOQueue(4, [tf.int64], shapes=[[3]])
        ids = queue.dequeue()
        table = tf1.get_variable("table", [10], tf.int64, use_resource=True)
        emb = tf1.get_variable("emb", [10, 2], use_resource=True)
        first = table.sparse_read(ids).op
        second = emb.sparse_read(first.outputs[0]).op
        fed = emb.sparse_read(tf1.placeholder(tf.int64, [3], name="fed")).op
    assert _depends_on(second, first) and not _depends_on(first, second)
    assert ids.op.name in _inputs_read(first) and ids.op.name in _inputs_read(second)
    assert _inputs_read(fed) == {"fed"}
