"""A job of one worker pays for no distribution it does not use (docs/performance.md).

With one worker the mean over the workers is its own gradient: its step must contain exactly the
ops of the plain step, whatever the plan says (no collective, accumulator, token or barrier); a
compressor still rounds the gradient as it would before sending. With no PS either, the worker
starts no server and its session is a plain local one (a gRPC session costs every `run`).
"""

from __future__ import annotations

import dataclasses
import socket
from collections import Counter

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from tensorflow.python.eager import context as eager_context  # noqa: E402

from adrun.env_vars import Settings  # noqa: E402
from adrun.runtime import session_setup  # noqa: E402
from adrun.runtime.capture import describe_graph  # noqa: E402
from adrun.task_context import TaskContext  # noqa: E402
from adrun.runtime.grads import GradientRecord, records_for  # noqa: E402
from adrun.runtime.kernels.gradient_sync import synchronized_apply  # noqa: E402
from adrun.spec import ClusterSpec, Node  # noqa: E402
from adrun.strategies import build_strategy  # noqa: E402
from adrun.strategies.document import dump_strategy  # noqa: E402
from tests.support.graph_walk import ops_run_by  # noqa: E402

LR = 0.5
IDS = np.array([1, 3, 3, 7])


def _model():
    """A sparse and a dense variable, their gradients and a plain SGD optimizer."""
    ids = tf1.placeholder(tf.int64, [None], name="ids")
    emb = tf1.get_variable("emb", [10, 4])
    w = tf1.get_variable("w", [4, 3])
    loss = tf.reduce_sum(tf.square(tf.matmul(tf.nn.embedding_lookup(emb, ids), w)))
    optimizer = tf1.train.GradientDescentOptimizer(LR)
    return ids, optimizer, optimizer.compute_gradients(loss, [emb, w])


def _context(tmp_path, strategy: str, workers: int, ps: int, replicas: int = 1, task: int = 0,
             graph: tf.Graph | None = None, **options: str) -> TaskContext:
    """Worker `task`'s context under `strategy`, planned for `graph` (else for _model's variables)."""
    if graph is None:
        graph = tf.Graph()
        with graph.as_default():
            _, optimizer, pairs = _model()
        records_for(graph).calls.append(GradientRecord(optimizer, pairs))
    spec = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=workers, ps=ps, replicas=replicas)])
    plan_file = tmp_path / f"{strategy}-{workers}w{ps}ps.yml"
    dump_strategy(build_strategy(strategy, describe_graph(graph), spec, options), plan_file)
    with socket.socket() as s:  # a free port: the lone worker must not listen on it
        s.bind(("localhost", 0))
        address = f"localhost:{s.getsockname()[1]}"
    cluster = {"worker": [address] * workers, "ps": [address] * ps}
    return TaskContext(mode="run", role="worker", task_index=task, num_workers=workers, job_id="t",
                       cluster=cluster, strategy_file=str(plan_file), capture_out=None)


def _op_types_run_by(op: tf.Operation) -> Counter:
    return Counter(o.type for o in ops_run_by(op))


def _step(ctx: TaskContext | None) -> tf.Operation:
    """The step op of _model: plain (`ctx` None) or as adrun builds it for `ctx`."""
    with tf.Graph().as_default():
        _, optimizer, pairs = _model()
        if ctx is None:
            return optimizer.apply_gradients(pairs)
        return synchronized_apply(optimizer, optimizer.apply_gradients, pairs, ctx, 0)


@pytest.mark.parametrize("strategy,ps,options", [
    ("AllReduce", 0, {}),  # sparse all-gather and dense all-reduce
    ("PS", 1, {}),  # synchronous accumulators
    ("PS", 1, {"staleness": "2"}),  # staleness queues
    ("Parallax", 1, {}),  # both kinds at once
])
def test_a_one_worker_step_is_the_plain_step(tmp_path, strategy, ps, options):
    plain = _op_types_run_by(_step(None))
    adrun = _op_types_run_by(_step(_context(tmp_path, strategy, 1, ps, **options)))
    assert adrun == plain, f"ops adrun added: {adrun - plain}; removed: {plain - adrun}"


def test_two_workers_still_synchronize(tmp_path):
    ops = _op_types_run_by(_step(_context(tmp_path, "AllReduce", 2, 0)))
    assert ops["CollectiveReduceV2"] == 1 and ops["CollectiveGatherV2"] == 3


def test_a_one_worker_compressor_still_rounds(tmp_path):
    """fp16 with one worker: no collective, and the update is the half-precision gradient."""
    ctx = _context(tmp_path, "AllReduce", 1, 0, compressor="fp16")
    with tf.Graph().as_default() as graph:
        ids, optimizer, pairs = _model()
        step = synchronized_apply(optimizer, optimizer.apply_gradients, pairs, ctx, 0)
        w = pairs[1][1]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            before, grad = sess.run([w, pairs[1][0]], {ids: IDS})
            sess.run(step, {ids: IDS})
            after = sess.run(w)
    assert not [op.type for op in graph.get_operations() if op.type.startswith("Collective")]
    rounded = grad.astype(np.float16).astype(np.float32)
    assert not np.array_equal(rounded, grad), "the test needs a gradient that fp16 rounds"
    np.testing.assert_array_equal(after, before - np.float32(LR) * rounded)


def test_a_lone_worker_gets_a_plain_local_session(tmp_path, monkeypatch):
    monkeypatch.setattr(session_setup, "_server", None)
    graph = tf.Graph()
    with graph.as_default():  # as the hook builds it: recorded, synchronized, known as a step
        ids, optimizer, pairs = _model()
        records = records_for(graph)
        records.calls.append(GradientRecord(optimizer, pairs))
        ctx = _context(tmp_path, "AllReduce", 1, 0, graph=graph)
        step = synchronized_apply(optimizer, optimizer.apply_gradients, pairs, ctx, 0)
        records.add_train_op(step)
    session_setup.prepare_graph(graph, ctx)
    target, config = session_setup.session_target(ctx, None)
    assert target == ""
    assert session_setup._server is None, "a lone worker started a gRPC server"
    assert list(config.device_filters) == [] and not config.experimental.collective_group_leader
    assert config.operation_timeout_in_ms == 0, "no peer to time out on, and it slows a local session down"
    assert graph.get_operation_by_name("w").device == "/job:localhost/replica:0/task:0/device:CPU:0"
    w = pairs[1][1]
    with tf1.Session(target, graph=graph, config=config) as sess:
        session_setup.join_job(sess, ctx)
        sess.run(tf1.variables_initializer(graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)))
        before = sess.run(w)
        sess.run(step, {ids: IDS})
        assert not np.array_equal(sess.run(w), before)


def test_a_lone_worker_without_a_config_gets_tfs_own(tmp_path):
    """What TF gives a Session created without a config (tf.config's threads and optimizer settings)."""
    assert session_setup.session_config(_context(tmp_path, "AllReduce", 1, 0), None) == eager_context.context().config


def test_a_lone_worker_with_replicas_gets_their_virtual_cpus(tmp_path):
    ctx = _context(tmp_path, "AllReduce", 1, 0, replicas=3)
    config = session_setup.session_config(ctx, tf1.ConfigProto(log_device_placement=True, operation_timeout_in_ms=5))
    assert config.device_count["CPU"] == 3 and config.log_device_placement
    assert config.operation_timeout_in_ms == 5, "the script's own settings are kept"


def test_a_worker_of_a_cluster_keeps_the_cluster_config(tmp_path):
    """Its session sees the PSs and itself, not the chief: TF's master would wait forever for a chief
    that has ended before this worker's first run (tests/integration/test_late_worker.py)."""
    config = session_setup.session_config(_context(tmp_path, "AllReduce", 2, 0, task=1), None)
    assert list(config.device_filters) == ["/job:ps", "/job:worker/task:1"]
    assert config.experimental.collective_group_leader == "/job:worker/replica:0/task:0"
    assert config.operation_timeout_in_ms == 600_000  # ADRUN_OP_TIMEOUT's default


def test_a_worker_of_a_cluster_gets_the_jobs_operation_timeout(tmp_path):
    ctx = _context(tmp_path, "AllReduce", 2, 0, task=1)
    short = session_setup.session_config(dataclasses.replace(ctx, settings=Settings(op_timeout_s=1.5)), None)
    assert short.operation_timeout_in_ms == 1500
    unbounded = session_setup.session_config(dataclasses.replace(ctx, settings=Settings(op_timeout_s=0)), None)
    assert unbounded.operation_timeout_in_ms == 0
