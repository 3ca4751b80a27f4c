"""What one training step sends between tasks, measured on an in-process cluster.

Two workers and two PSs run as TF gRPC servers inside the test process. Each worker's graph is
built and rewritten by adrun's kernels as in a job (`synchronized_apply` where the optimizer applies
its gradients, then the session set-up: placement, lookups of PS variables), and the two workers
run synchronous steps in two threads. A traced step's partition graphs show every tensor sent from
one task to another (`_Send` nodes), and its step stats the size each had. For a batch with
repeated ids those transfers must be exactly strategies/wire_bound.py's lower bound: each dense
variable once each way, and per sparse variable (or shard) the distinct ids once, the distinct
rows once, one summed gradient row per distinct id. Collectives (all-reduce, all-gather) do not
show in partition graphs: for AllReduce the test reads the rows each worker hands to the gather.

(Step stats also carry "RecvTensor" events with sizes, but those come from RPC logging, which
each tracing session switches on and off on every task: two workers tracing close together cut
each other's logs short.) The servers cannot be stopped inside a process; each test starts its own
four on fresh ports, so shared accumulators and queues never meet another test's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.placement import TaskId  # noqa: E402
from adrun.runtime import session_setup  # noqa: E402
from adrun.runtime.capture import describe_graph  # noqa: E402
from adrun.task_context import TaskContext  # noqa: E402
from adrun.runtime.grads import GradientRecord, records_for  # noqa: E402
from adrun.runtime.kernels.gradient_sync import synchronized_apply  # noqa: E402
from adrun.runtime.kernels.partitioning import partitioner_for  # noqa: E402
from adrun.spec import ClusterSpec, Node  # noqa: E402
from adrun.strategies import build_strategy  # noqa: E402
from adrun.strategies.document import Strategy, dump_strategy, shard_sizes  # noqa: E402
from adrun.strategies.wire_bound import step_transfers  # noqa: E402
from tests.support.ports import free_ports  # noqa: E402

WORKERS, NUM_PS = 2, 2
VOCAB, DIM, BAG, BATCH = 40, 4, 5, 6
STEPS = 4
TRACED_STEP = [2, 3]  # by worker
TIMEOUT_S = 120


def batch(worker: int) -> tuple[np.ndarray, np.ndarray]:
    """30 lookups naming 8 (worker 0) or at most 18 (worker 1) distinct rows, on both halves of the table."""
    rng = np.random.default_rng(worker)
    ids = rng.choice(np.arange(0, VOCAB, 5), (BATCH, BAG)) if worker == 0 else rng.integers(12, 30, (BATCH, BAG))
    return ids, rng.normal(size=(BATCH, 3)).astype(np.float32)


def distinct_rows(strategy: Strategy) -> dict[str, list[int]]:
    """Distinct rows per worker of the table, or of each of its shards (contiguous row ranges)."""
    [emb] = [v for v in strategy.variables if v.name == "emb"]
    ids = [np.unique(batch(w)[0]) for w in range(WORKERS)]
    if emb.partition is None:
        return {"emb": [len(i) for i in ids]}
    bounds = np.cumsum([0, *shard_sizes(VOCAB, len(emb.partition.shards))])
    return {f"emb/part_{s}": [int(((i >= bounds[s]) & (i < bounds[s + 1])).sum()) for i in ids]
            for s in range(len(bounds) - 1)}


def _model(partition_of=lambda name: None):
    ids = tf1.placeholder(tf.int64, [None, BAG], name="ids")
    y = tf1.placeholder(tf.float32, [None, 3], name="y")

    def variable(name, shape):
        partition = partition_of(name)
        return tf1.get_variable(name, shape, partitioner=partitioner_for(partition) if partition else None)

    emb, w, b = variable("emb", [VOCAB, DIM]), variable("w", [DIM, 3]), variable("b", [3])
    pooled = tf.reduce_mean(tf1.nn.embedding_lookup(emb, ids, partition_strategy="div"), axis=1)
    loss = tf.reduce_mean(tf.square(tf.matmul(pooled, w) + b - y))
    optimizer = tf1.train.GradientDescentOptimizer(0.1)
    pairs = optimizer.compute_gradients(loss)
    # what the hook's apply_gradients patch records (the fingerprint counts gradient kinds)
    records_for(tf1.get_default_graph()).calls.append(GradientRecord(optimizer, pairs))
    return (ids, y), optimizer, pairs


@dataclass
class Worker:
    task: int
    graph: tf.Graph
    inputs: tuple
    train_op: tf.Operation
    server: tf.distribute.Server
    ctx: TaskContext


def _plan(tmp_path: Path, strategy: str, options: dict[str, str], pool_bags: bool) -> Path:
    """The builder's plan, with every PS synchronizer's `pool_bags` set as given."""
    with tf.Graph().as_default() as graph:
        _model()
        item = describe_graph(graph)
    spec = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=WORKERS, ps=NUM_PS)])
    path = tmp_path / "plan.yml"
    dump_strategy(build_strategy(strategy, item, spec, options), path)
    document = yaml.safe_load(path.read_text())
    for variable in document["variables"]:
        for sync in variable["partition"]["shards"] if variable.get("partition") else [variable["sync"]]:
            if sync["kind"] == "ps":
                sync["pool_bags"] = pool_bags
    path.write_text(yaml.safe_dump(document))
    return path


def _start_cluster(tmp_path: Path, strategy: str, options: dict[str, str], pool_bags: bool = False) -> list[Worker]:
    """Two workers and two PS tasks; the lookup pooled on the PS or not (`pool_bags`: not, by
    default, so the step moves what strategies/wire_bound.py bounds)."""
    plan = _plan(tmp_path, strategy, options, pool_bags)
    ports = free_ports(WORKERS + NUM_PS)
    cluster = {"worker": [f"localhost:{p}" for p in ports[:WORKERS]], "ps": [f"localhost:{p}" for p in ports[WORKERS:]]}
    config = session_setup.server_config()
    for p in range(NUM_PS):
        tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="ps", task_index=p, config=config)
    workers = []
    for task in range(WORKERS):
        ctx = TaskContext(mode="run", role="worker", task_index=task, num_workers=WORKERS, job_id="t",
                          cluster=cluster, strategy_file=str(plan), capture_out=None)
        server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=task, config=config)
        with tf.Graph().as_default() as graph:
            inputs, optimizer, pairs = _model(ctx.plan.partition)
            train_op = synchronized_apply(optimizer, optimizer.apply_gradients, pairs, ctx, 0)
        workers.append(Worker(task, graph, inputs, train_op, server, ctx))
    return workers


def _job(worker: Worker, monkeypatch, extra_fetches: list[tf.Tensor]) -> Callable[[], tuple[tf1.RunMetadata, list]]:
    """What the worker's process does in a job, to run in a thread: a session prepared by adrun, the
    script's initializer, STEPS synchronous steps, one of them traced (with `extra_fetches`)."""
    user_config = tf1.ConfigProto(operation_timeout_in_ms=TIMEOUT_S * 1000)
    # a job's process has one server, which session_setup keeps; here each worker brings its own
    monkeypatch.setattr(session_setup, "_server", worker.server)
    session_setup.prepare_graph(worker.graph, worker.ctx)
    target, config = session_setup.session_target(worker.ctx, user_config)
    ids, y = worker.inputs
    ids_value, y_value = batch(worker.task)
    feed = {ids: ids_value, y: y_value}
    with worker.graph.as_default():
        init = tf1.global_variables_initializer()

    def steps() -> tuple[tf1.RunMetadata, list]:
        with tf1.Session(target, graph=worker.graph, config=config) as sess:
            session_setup.join_job(sess, worker.ctx)
            sess.run(init)
            start = session_setup.take_start_op(worker.graph)
            if start is not None:
                sess.run(start)
            for step in range(STEPS):
                if step != TRACED_STEP[worker.task]:
                    sess.run(worker.train_op, feed)
                    continue
                metadata = tf1.RunMetadata()
                options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE, output_partition_graphs=True)
                fetched = sess.run([worker.train_op, *extra_fetches], feed, options=options, run_metadata=metadata)
            return metadata, fetched[1:]

    return steps


def run_steps(workers: list[Worker], monkeypatch, extra_fetches=None) -> list[tuple[tf1.RunMetadata, list]]:
    """Every worker's job at once; each one's traced step metadata and extra fetched values."""
    extra_fetches = extra_fetches or [[] for _ in workers]
    jobs = [_job(w, monkeypatch, f) for w, f in zip(workers, extra_fetches)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(job) for job in jobs]
        return [f.result(timeout=TIMEOUT_S) for f in futures]


def _task(device: str) -> TaskId:
    m = re.match(r"/job:(\w+)/replica:\d+/task:(\d+)", device)
    return TaskId(m[1], int(m[2]))


def cross_task_tensors(metadata: tf1.RunMetadata) -> list[tuple[TaskId, TaskId, int | None]]:
    """(source task, destination task, bytes) of every tensor with a payload one worker's traced
    step sent from one task to another: the `_Send` nodes of its partition graphs, sized by what
    their input produced in that step (None when the step stats lack it)."""
    no_size = (0, tf.resource.as_datatype_enum)  # DT_INVALID (no output), resource handles
    produced: dict[tuple[str, str, int], int] = {}
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            for out in node.output:
                d = out.tensor_description
                if d.dtype not in no_size:
                    size = int(np.prod([dim.size for dim in d.shape.dim])) * tf.as_dtype(d.dtype).size
                    produced[(device.device, node.node_name, out.slot)] = size
    found = []
    for partition in metadata.partition_graphs:
        for node in partition.node:
            source, destination = node.attr["send_device"].s.decode(), node.attr["recv_device"].s.decode()
            if node.op != "_Send" or _task(source) == _task(destination):
                continue
            name, _, slot = node.input[0].partition(":")
            nbytes = produced.get((source, name, int(slot or 0)))
            if nbytes != 0:
                found.append((_task(source), _task(destination), nbytes))
    return found


def _by_pair(transfers) -> Counter:
    total: Counter = Counter()
    for source, destination, nbytes in transfers:
        total[(source, destination)] += nbytes
    return total


@pytest.mark.parametrize("strategy,options", [
    ("PSLoadBalancing", {}),
    ("PSLoadBalancing", {"sync": "false"}),
    ("PSLoadBalancing", {"chunk_bytes": "16"}),  # w [4, 3] in 3 chunks on one PS, pulled as applied
    pytest.param("PartitionedPS", {}, marks=pytest.mark.full),
    ("Parallax", {}),
    pytest.param("PS", {"staleness": "1"}, marks=pytest.mark.full),
])
def test_a_step_moves_exactly_the_lower_bound(tmp_path, monkeypatch, strategy, options):
    workers = _start_cluster(tmp_path, strategy, options)
    plan = workers[0].ctx.strategy
    bound = step_transfers(plan, distinct_rows(plan))
    for worker, (metadata, _) in zip(workers, run_steps(workers, monkeypatch)):
        me = TaskId("worker", worker.task)
        measured = cross_task_tensors(metadata)
        assert all(nbytes is not None for _, _, nbytes in measured), (
            f"{me}: a tensor without a size in the step stats crossed (a fed input sent on to a PS): {measured}")
        # (Parallax's dense all-reduce runs on collectives, which partition graphs do not show)
        expected = [(t.source, t.destination, t.nbytes) for t in bound
                    if me in (t.source, t.destination) and "ps" in (t.source.role, t.destination.role)]
        assert _by_pair(measured) == _by_pair(expected), f"{me}: {sorted(measured)}"
        # one tensor per dense variable (or shard) pulled; per sparse variable (or shard): the
        # distinct ids and the gradient rows to the PS, the rows back; synchronous dense gradients
        # (all small here) go to each PS task as one buffer (ps_sync.ps_aggregations), applied
        # ones (asynchronous) one per variable
        pulls = [t for t in expected if t[1] == me]
        sparse_pulls = [t for t in bound if t.destination == me and "distinct rows" in t.what]
        dense_pushes = [t for t in bound if t.source == me and "gradient pushed" in t.what]
        batched = options.get("sync", "true") == "true" and options.get("staleness", "0") == "0"
        pushes_per_task = Counter(t.destination for t in dense_pushes)
        assert len(measured) == (len(pulls) + 2 * len(sparse_pulls)
                                 + (len(pushes_per_task) if batched else len(dense_pushes))), sorted(measured)


def test_each_worker_all_gathers_its_distinct_rows_once(tmp_path, monkeypatch):
    workers = _start_cluster(tmp_path, "AllReduce", {})
    gathered = []
    for w in workers:
        [values] = [op.inputs[0] for op in w.graph.get_operations()
                    if op.type == "CollectiveGatherV2" and op.inputs[0].dtype == tf.float32]
        gathered.append([values])
    results = run_steps(workers, monkeypatch, gathered)
    distinct = distinct_rows(workers[0].ctx.strategy)["emb"]
    for (_, [values]) in results:
        # padded to the longest worker's count of distinct rows, not its BATCH * BAG lookups
        assert values.shape == (max(distinct), DIM)


def pooled_transfers(strategy: Strategy) -> list[tuple[TaskId, TaskId, int]]:
    """What a pooled lookup of `emb` moves in one step (pooled_bags.py), per worker and shard s on
    PS task p: to p the shard's distinct ids (int64), per id of the batch on the shard its index
    into them and its example (int32 each), and once per PS task the batch size (int32) and d_sum
    [batch, dim]; back the shard's partial sums [batch, dim]."""
    [emb] = [v for v in strategy.variables if v.name == "emb"]
    syncs = emb.synchronizers()
    bounds = np.cumsum([0, *shard_sizes(VOCAB, len(syncs))])
    transfers = []
    for w in range(WORKERS):
        ids = batch(w)[0].ravel()
        me = TaskId("worker", w)
        for s, sync in enumerate(syncs):
            on_shard = ids[(ids >= bounds[s]) & (ids < bounds[s + 1])]
            server = TaskId("ps", sync.ps_task)
            transfers.append((me, server, 8 * len(np.unique(on_shard)) + 2 * 4 * len(on_shard)))
            transfers.append((server, me, 4 * BATCH * DIM))
        for task in {sync.ps_task for sync in syncs}:
            transfers.append((me, TaskId("ps", task), 4 + 4 * BATCH * DIM))
    return transfers


@pytest.mark.parametrize("strategy,options", [
    ("PSLoadBalancing", {}),
    ("PSLoadBalancing", {"sync": "false"}),
    ("PartitionedPS", {}),
    pytest.param("Parallax", {}, marks=pytest.mark.full),
])
def test_a_pooled_lookup_moves_sums_not_rows(tmp_path, monkeypatch, strategy, options):
    """With `pool_bags` (the default) the step moves the bound's dense transfers unchanged and, for
    the embedding, what `pooled_transfers` counts: no row crosses, either way."""
    workers = _start_cluster(tmp_path, strategy, options, pool_bags=True)
    plan = workers[0].ctx.strategy
    others = [t for t in step_transfers(plan, distinct_rows(plan)) if not t.what.startswith("emb")]
    pooled = pooled_transfers(plan)
    for worker, (metadata, _) in zip(workers, run_steps(workers, monkeypatch)):
        me = TaskId("worker", worker.task)
        measured = cross_task_tensors(metadata)
        assert all(nbytes is not None for _, _, nbytes in measured), measured
        expected = [(t.source, t.destination, t.nbytes) for t in others
                    if me in (t.source, t.destination) and "ps" in (t.source.role, t.destination.role)]
        expected += [t for t in pooled if me in t[:2]]
        assert _by_pair(measured) == _by_pair(expected), f"{me}: {sorted(measured)}"
