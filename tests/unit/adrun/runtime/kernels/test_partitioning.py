"""Partitioning variables that take their shape from their initial value, read from graphs in one process.

`get_variable(name, initializer=<value>)` without `shape=` left TF's partitioner without a shape
("Shape of a new partitioned variable must be fully defined"). The runtime's get_variable patch must
cut such a variable into shards holding the plain variable's values, in its dtype; capture marks a
variable whose initial value has no fully known static shape, so that no plan cuts it.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from tensorflow.python.client import session as tf_session  # noqa: E402
from tensorflow.python.ops import embedding_ops, variable_scope  # noqa: E402

from adrun.runtime import patches  # noqa: E402
from adrun.runtime.capture import describe_graph  # noqa: E402
from adrun.runtime.grads import GradientRecord, records_for  # noqa: E402
from adrun.runtime.kernels.partitioning import REDUCED_GRADIENT  # noqa: E402
from adrun.task_context import TaskContext  # noqa: E402
from adrun.spec import ClusterSpec, Node  # noqa: E402
from adrun.strategies import build_strategy  # noqa: E402
from adrun.strategies.document import dump_strategy  # noqa: E402

UNKNOWN_SHAPE = "its shape is not fully known when the graph is built (an initial value of unknown shape)"
SPEC = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=0)])


def _script() -> dict:
    """What a script may hand get_variable instead of a shape, then a random op that must keep its seed."""
    tf1.set_random_seed(5)
    values = np.random.default_rng(3)
    made = {
        "array": tf1.get_variable("array", initializer=values.normal(size=(5, 3))),  # float64, as numpy's
        "tensor": tf1.get_variable("tensor", initializer=tf.constant(values.normal(size=(4, 2)).astype(np.float32))),
        "list": tf1.get_variable("list", initializer=[[1, 2], [3, 4], [5, 6]]),  # int32, as the list's
        "random": tf1.get_variable("random", initializer=tf.random.normal([6], seed=1)),
        "callable": tf1.get_variable("callable", initializer=lambda: tf.random.uniform([3, 3])),
    }
    made["noise"] = tf.random.uniform([2])
    return made


def _values(graph: tf.Graph, made: dict) -> dict[str, np.ndarray]:
    """What the script fetches, and its variables as the graph lists them (shards reassembled by
    their offsets): both must give the whole values, also once the graph is finalized (as
    MonitoredTrainingSession does), when fetching can add no op."""
    with graph.as_default():
        init = tf1.initializers.global_variables()
    graph.finalize()
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        fetched = sess.run(made)
        listed: dict[str, np.ndarray] = {}
        for var in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES):
            value = sess.run(var)
            info = var._save_slice_info
            if info is None:
                listed[var.op.name] = value
                continue
            full = listed.setdefault(info.full_name, np.zeros(info.full_shape, value.dtype))
            full[tuple(slice(o, o + n) for o, n in zip(info.var_offset, info.var_shape))] = value
    assert sorted(listed) == sorted(k for k in fetched if k != "noise")
    for name, value in listed.items():
        np.testing.assert_array_equal(fetched[name], value, err_msg=name)
    return fetched


def _trained(item):
    """`item` as if the optimizer updated every variable, so that the builders plan them."""
    return item.model_copy(update={"variables": [v.model_copy(update={"grad": "dense"}) for v in item.variables]})


@pytest.fixture
def partitioning(tmp_path, monkeypatch):
    """Installs the runtime's partitioning patch for a plan; the patched TF functions are restored after."""
    monkeypatch.setattr(variable_scope._VariableStore, "get_variable", variable_scope._VariableStore.get_variable)
    monkeypatch.setattr(embedding_ops, "embedding_lookup", embedding_ops.embedding_lookup)
    monkeypatch.setattr(tf1.nn, "embedding_lookup", tf1.nn.embedding_lookup)
    monkeypatch.setattr(tf_session, "_REGISTERED_EXPANSIONS", list(tf_session._REGISTERED_EXPANSIONS))

    def install(plan) -> None:
        plan_file = tmp_path / "plan.yml"
        dump_strategy(plan, plan_file)
        patches._patch_partitioning(TaskContext(
            mode="run", role="worker", task_index=0, num_workers=2, job_id="t", cluster={},
            strategy_file=str(plan_file), capture_out=None,
        ))

    return install


def test_variables_shaped_by_their_initial_value_are_cut_holding_the_plain_values(partitioning):
    plain = tf.Graph()
    with plain.as_default():
        plain_made = _script()
    captured = describe_graph(plain)
    assert {v.name: (v.shape, v.dtype, v.partition_blocker) for v in captured.variables} == {
        "array": ([5, 3], "float64", None), "tensor": ([4, 2], "float32", None), "list": ([3, 2], "int32", None),
        "random": ([6], "float32", None), "callable": ([3, 3], "float32", None),
    }
    plan = build_strategy("PartitionedAR", _trained(captured), SPEC, {})
    assert all(v.partition is not None for v in plan.variables)
    partitioning(plan)

    worker = tf.Graph()
    with worker.as_default():
        made = _script()
        with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
            again = tf1.get_variable("tensor")  # reused without a shape: TF needs one to find it
    assert again is made["tensor"]
    for name in ("array", "tensor", "list", "random", "callable"):
        var = made[name]
        assert isinstance(var, variable_scope.variables.PartitionedVariable), name
        assert [v.op.name for v in var] == [f"{name}/part_0", f"{name}/part_1"]
        assert var.dtype == plain_made[name].dtype and all(v.dtype.base_dtype == var.dtype for v in var), name
    assert describe_graph(worker).fingerprint == captured.fingerprint  # what a worker checks against the plan

    expected, got = _values(plain, plain_made), _values(worker, made)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_capture_marks_a_variable_of_unknown_static_shape_and_plans_keep_it_whole():
    graph = tf.Graph()
    with graph.as_default():
        ones = np.ones((4, 2), np.float32)
        tf1.get_variable("rows_unknown", initializer=tf1.placeholder_with_default(ones, [None, 2]))
        tf1.get_variable("rank_unknown", initializer=tf1.placeholder_with_default(ones, None))
        tf1.get_variable("known", initializer=ones)
    item = describe_graph(graph)
    assert {v.name: (v.shape, v.partition_blocker) for v in item.variables} == {
        "rows_unknown": ([-1, 2], UNKNOWN_SHAPE), "rank_unknown": ([-1], UNKNOWN_SHAPE), "known": ([4, 2], None),
    }
    plan = build_strategy("RandomAxisPartitionAR", _trained(item), SPEC, {})
    assert {v.name: (v.partition is not None, v.note) for v in plan.variables} == {
        "rows_unknown": (False, f"kept whole: {UNKNOWN_SHAPE}"),
        "rank_unknown": (False, "kept whole: the size of axis 0 is unknown"),
        "known": (True, None),
    }


def test_a_gradient_reduced_on_its_way_to_the_update_keeps_its_variable_whole():
    """clip_by_norm (and any norm of the gradient) taken per shard would differ from the plain run's:
    capture marks such a variable, and neither PartitionedPS nor PS chunks cut it."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 64])
        raw, clipped, scaled = (tf1.get_variable(n, [64, 64]) for n in ("raw", "clipped", "scaled"))
        loss = tf.reduce_sum(tf.matmul(tf.matmul(tf.matmul(x, raw), clipped), scaled))
        optimizer = tf1.train.GradientDescentOptimizer(0.1)
        (g_raw, _), (g_clipped, _), (g_scaled, _) = optimizer.compute_gradients(loss, [raw, clipped, scaled])
        pairs = [(g_raw, raw), (tf.clip_by_norm(g_clipped, 1.0), clipped), (g_scaled * 0.5, scaled)]
        records_for(graph).calls.append(GradientRecord(optimizer, pairs))
    item = describe_graph(graph)
    assert {v.name: v.partition_blocker for v in item.variables} == {
        "raw": None, "clipped": REDUCED_GRADIENT, "scaled": None}  # an elementwise scale cuts as it is
    two_ps = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=2)])
    cut = {v.name: (v.partition is not None, v.note)
           for v in build_strategy("PSLoadBalancing", item, two_ps, {"chunk_bytes": "4096"}).variables}
    assert cut == {"raw": (True, None), "clipped": (False, f"kept whole: {REDUCED_GRADIENT}"), "scaled": (True, None)}
    split = {v.name: v.partition is not None for v in build_strategy("PartitionedPS", item, two_ps, {}).variables}
    assert split == {"raw": True, "clipped": False, "scaled": True}
