"""How synchronous steps are ordered between workers, read from the graphs each worker builds.

TensorFlow shares one step id among the workers' steps with collectives, and a worker's step end
aborts what other workers still have pending under that id on the tasks it touched. So a step that
all-reduces must never wait on a PS queue (a non-chief waiting for its release token on PS 0 was
aborted with `Cleanup <step id>` under load); steps without collectives keep the token queues.
The same holds for the start op each worker runs before its first step.
"""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.graph_item import GraphItem, VariableInfo  # noqa: E402
from adrun.task_context import TaskContext  # noqa: E402
from adrun.runtime.kernels.allreduce_sync import instance_key  # noqa: E402
from adrun.runtime.kernels.devices import ps_device, worker_device  # noqa: E402
from adrun.runtime.kernels.gradient_sync import synchronized_apply  # noqa: E402
from adrun.runtime.kernels.start_sync import build_start_op  # noqa: E402
from adrun.spec import ClusterSpec, Node  # noqa: E402
from adrun.strategies import build_strategy  # noqa: E402
from adrun.strategies.document import dump_strategy  # noqa: E402
from tests.support.graph_walk import ops_run_by  # noqa: E402

WORKERS = 2
VARIABLES = GraphItem(variables=[
    VariableInfo(name="emb", shape=[10, 4], dtype="float32", trainable=True, grad="sparse"),
    VariableInfo(name="w", shape=[4, 3], dtype="float32", trainable=True, grad="dense"),
])


def _step(tmp_path, strategy: str, task: int, optimizer: str, **options: str) -> tf.Operation:
    """Worker `task`'s training step op."""
    spec = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=WORKERS, ps=2)])
    plan_file = tmp_path / f"{strategy}.yml"
    dump_strategy(build_strategy(strategy, VARIABLES, spec, options), plan_file)
    ctx = TaskContext(
        mode="run", role="worker", task_index=task, num_workers=WORKERS, job_id="t",
        cluster={}, strategy_file=str(plan_file), capture_out=None,
    )
    graph = tf.Graph()
    with graph.as_default():
        ids = tf1.placeholder(tf.int64, [None], name="ids")
        emb = tf1.get_variable("emb", [10, 4])
        w = tf1.get_variable("w", [4, 3])
        loss = tf.reduce_sum(tf.matmul(tf.nn.embedding_lookup(emb, ids), w))
        global_step = tf1.train.get_or_create_global_step()
        if optimizer == "adam":
            opt = tf1.train.AdamOptimizer(0.1)
        elif optimizer == "sgd-decay":  # the learning rate reads global_step, which the chief's step advances
            opt = tf1.train.GradientDescentOptimizer(tf1.train.exponential_decay(0.1, global_step, 10, 0.5))
        else:
            opt = tf1.train.GradientDescentOptimizer(0.1)
        pairs = opt.compute_gradients(loss, [emb, w])
        return synchronized_apply(opt, lambda p: opt.apply_gradients(p, global_step), pairs, ctx, 0)


def _step_ops(tmp_path, strategy: str, task: int, optimizer: str, **options: str) -> list[tf.Operation]:
    """Every op worker `task`'s training step runs (the step op's transitive inputs)."""
    return ops_run_by(_step(tmp_path, strategy, task, optimizer, **options))


def _ps_queue_ops(ops: list[tf.Operation]) -> list[str]:
    """Enqueues and dequeues on queues that live on a PS task."""
    return [op.name for op in ops if op.type.startswith("Queue") and "/job:ps" in op.inputs[0].op.device]


def _collectives(ops: list[tf.Operation]) -> list[str]:
    return [op.name for op in ops if op.type.startswith("Collective")]


@pytest.mark.parametrize("task", [0, 1])
@pytest.mark.parametrize("optimizer,barriers", [("sgd", 1), ("sgd-decay", 2), ("adam", 2)])
def test_a_step_with_collectives_waits_on_no_ps_queue(tmp_path, task, optimizer, barriers):
    """Every worker ends the step with a barrier. The chief's global_step increment (and Adam's beta
    powers) waits in a second barrier for every worker's own updates (w's all-reduce) only when
    those updates read that state: Adam's do, SGD's read the global_step only through a decayed
    learning rate."""
    ops = _step_ops(tmp_path, "Parallax", task, optimizer)
    assert _collectives(ops), "Parallax all-reduces w: the step must contain collectives"
    assert _ps_queue_ops(ops) == []
    assert len([name for name in _collectives(ops) if name.startswith("adrun_barrier")]) == barriers


@pytest.mark.parametrize("task", [0, 1])
@pytest.mark.parametrize("optimizer,beside", [("sgd", True), ("sgd-decay", False), ("adam", False)])
def test_the_end_barrier_waits_for_the_all_reduce_only_when_the_finish_step_must(tmp_path, task, optimizer, beside):
    """Parallax (emb on a PS, w all-reduced): the step runs w's all-reduce and update, but with SGD
    the end barrier does not wait for them (it guards the PS tasks: the chief's updates, the pushes),
    so it completes while the all-reduce still runs. When w's update reads state the chief's finish
    changes (a decayed learning rate's global_step, Adam's beta powers) it does, as before."""
    step = _step(tmp_path, "Parallax", task, optimizer)
    ran = ops_run_by(step)
    end_key = instance_key("adrun/barrier/step/0/end")
    end = [op for op in ran if op.type == "CollectiveGatherV2" and tf.get_static_value(op.inputs[3]) == end_key]
    assert len(end) == 1
    before_end = ops_run_by(end[0])
    w_update = [op for op in ran if op.type.startswith("ResourceApply") and op.inputs[0].op.name == "w"]
    assert len(w_update) == 1
    assert any(op.type == "CollectiveReduceV2" for op in ran)
    assert (w_update[0] in before_end) is not beside
    assert any(op.type == "CollectiveReduceV2" for op in before_end) is not beside
    if task == 0:  # the chief's PS update of emb still comes before the barrier
        assert any(op.type.startswith("ResourceSparseApply") or op.type.startswith("ResourceScatter")
                   for op in before_end), sorted({op.type for op in before_end})


@pytest.mark.parametrize("options", [{"staleness": "2"}, {"sync": "false"}])
def test_stale_or_async_ps_variables_next_to_all_reduce_wait_on_no_ps_queue(tmp_path, options):
    """The all-reduce keeps the workers in lock step: no staleness queues, one end-of-step barrier."""
    ops = _step_ops(tmp_path, "Parallax", 1, "sgd", **options)
    assert _ps_queue_ops(ops) == []
    assert len([name for name in _collectives(ops) if name.startswith("adrun_barrier")]) == 1


@pytest.mark.parametrize("task", [0, 1])
def test_a_step_without_collectives_keeps_the_token_queues(tmp_path, task):
    ops = _step_ops(tmp_path, "PSLoadBalancing", task, "sgd")
    assert _collectives(ops) == []
    queue_ops = _ps_queue_ops(ops)
    assert any("adrun_tokens" in name for name in queue_ops), queue_ops


def _start_op(task: int, replicated: bool) -> tf.Operation:
    graph = tf.Graph()
    with graph.as_default():
        tf1.get_variable("emb", [10, 4])
        tf1.get_variable("w", [4, 3])
    local = worker_device(task)
    devices = {"emb": ps_device(0), "w": local if replicated else ps_device(1)}
    return build_start_op(graph, devices, local, task, WORKERS, uses_ps=True)


@pytest.mark.parametrize("task", [0, 1])
def test_a_start_with_a_broadcast_waits_on_no_ps_queue(task):
    ops = ops_run_by(_start_op(task, replicated=True))
    assert _collectives(ops), "w is replicated on the workers: the chief broadcasts it"
    assert _ps_queue_ops(ops) == []


@pytest.mark.parametrize("task", [0, 1])
def test_a_start_without_replicated_variables_uses_a_start_token(task):
    ops = ops_run_by(_start_op(task, replicated=False))
    assert _collectives(ops) == []
    assert any("adrun_start" in name for name in _ps_queue_ops(ops))
