"""The pooled-lookup matcher on small graph-mode graphs: it names the very reduction the script built,
d_pooled is numerically tf.gradients(loss, pooled), and each refused pattern gives its reason.

Graphs are built as a TF1 script leaves them: compute_gradients then apply_gradients (what
`GradientDescentOptimizer.minimize` does), the pairs handed to apply_gradients kept as the matcher's
`gradients`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.kernels.devices import ps_device  # noqa: E402
from adrun.runtime.kernels.pooled_lookups import (  # noqa: E402
    CONTROL_FLOW, DTYPE, GRADIENT_CHAIN, MAX_NORM, NOT_ON_PS, OTHER_AXIS, OTHER_CONSUMER, RANK, REDUCED_ON_THE_WAY, WEIGHTED, Kind, Matches,
    pooled_lookups,
)

IDS = np.array([[3, 1, 3, 7], [7, 7, 0, 3], [1, 1, 1, 1]])  # repeated ids, 3 bags of 4
SPARSE = ([[0, 0], [0, 1], [0, 2], [2, 0], [2, 1]], [3, 1, 3, 7, 0], [3, 3])  # bag 1 empty
WEIGHTS = np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(3, 4)


def _table(partitioned: bool):
    partitioner = tf1.fixed_size_partitioner(3) if partitioned else None
    return tf1.get_variable("table", [8, 4], initializer=tf1.random_normal_initializer(seed=1),
                            partitioner=partitioner, use_resource=True)


def _build(make_pooled: Callable[[object], object], partitioned: bool = False, on_ps: bool = True,
           clip: bool = False):
    """(graph, its loss, the pooled tensor the script made, the matcher's result)."""
    graph = tf.Graph()
    with graph.as_default():
        table = _table(partitioned)
        pooled = make_pooled(table)
        loss = tf.reduce_sum(pooled * tf.constant(WEIGHTS[:, :4])[: pooled.shape[0]] ** 2 * pooled)
        opt = tf1.train.GradientDescentOptimizer(0.1)
        pairs = opt.compute_gradients(loss)
        if clip:
            grads, _ = tf.clip_by_global_norm([g for g, _ in pairs], 1.0)
            pairs = list(zip(grads, [v for _, v in pairs]))
        opt.apply_gradients(pairs)
        variables = tf1.global_variables()
        names = [v.op.name for v in variables]
    device = ps_device(0) if on_ps else "/job:worker/task:0/device:CPU:0"
    matches = pooled_lookups(graph, {n: device for n in names}, {v.op.name: g for g, v in pairs})
    return graph, loss, pooled, matches


def _d_pooled_agrees(graph, loss, pooled, matches: Matches) -> None:
    (found,) = matches.pooled
    assert found.backward is not None
    with graph.as_default(), tf1.Session() as sess:
        expected = tf.gradients(loss, pooled)[0]
        sess.run(tf1.global_variables_initializer())
        want, got = sess.run([expected, found.backward.d_pooled])
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6)
    assert np.abs(want).max() > 0


DENSE = [
    (lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=1), Kind.MEAN),
    (lambda t: tf.reduce_sum(tf.nn.embedding_lookup(t, IDS), axis=1), Kind.SUM),
    (lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=-2), Kind.MEAN),
]


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize(("make", "kind"), DENSE)
def test_dense_bag_reduction_is_found(make, kind, partitioned: bool) -> None:
    graph, loss, pooled, matches = _build(make, partitioned)
    assert matches.refused == ()
    (found,) = matches.pooled
    assert found.reduction is pooled.op
    assert (found.kind, found.bag_axis) == (kind, 1)
    assert len(found.shards) == (3 if partitioned else 1)
    assert {s.variable for s in found.shards} == (
        {"table/part_0", "table/part_1", "table/part_2"} if partitioned else {"table"})
    assert all(s.gather.type == "ResourceGather" and s.gradient is not None for s in found.shards)
    assert tf.get_static_value(found.ids).tolist() == IDS.tolist()
    # each shard's gradient is its own gather's: TF's _GatherGrad flattened that gather's ids
    assert all(s.gradient.indices.op.inputs[0] is s.gather.inputs[1] for s in found.shards)
    _d_pooled_agrees(graph, loss, pooled, matches)


@pytest.mark.parametrize(("combiner", "kind"), [("mean", Kind.MEAN), ("sum", Kind.SUM), ("sqrtn", Kind.SQRTN)])
def test_sparse_lookup_is_found(combiner: str, kind: Kind) -> None:
    def make(t):
        sp = tf.SparseTensor(SPARSE[0], tf.constant(SPARSE[1], tf.int64), SPARSE[2])
        return tf.nn.embedding_lookup_sparse(t, sp, None, combiner=combiner)

    graph, loss, pooled, matches = _build(make)
    assert matches.refused == ()
    (found,) = matches.pooled
    assert found.reduction is pooled.op
    assert (found.kind, found.bag_axis) == (kind, None)
    assert found.ids.op.type == "Unique" and found.segment_ids is pooled.op.inputs[2]
    _d_pooled_agrees(graph, loss, pooled, matches)


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize(("reduce", "kind"), [(tf.reduce_mean, Kind.MEAN), (tf.reduce_sum, Kind.SUM)])
def test_ids_of_unknown_batch_are_found(reduce, kind: Kind, partitioned: bool) -> None:
    """Ids fed as [None, bag]: TF's gradient of the reduction broadcasts d_pooled (BroadcastTo)
    where a known shape tiles it, and the mean's divisor is computed at run time."""
    graph = tf.Graph()
    with graph.as_default():
        ids = tf1.placeholder(tf.int64, [None, 4])
        pooled = reduce(tf.nn.embedding_lookup(_table(partitioned), ids), axis=1)
        loss = tf.reduce_sum(pooled * pooled)
        pairs = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
        expected = tf.gradients(loss, pooled)[0]
    matches = pooled_lookups(graph, {v.op.name: ps_device(0) for _, v in pairs}, {v.op.name: g for g, v in pairs})
    assert matches.refused == ()
    (found,) = matches.pooled
    assert found.reduction is pooled.op and found.kind is kind
    assert found.backward is not None
    with graph.as_default(), tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        want, got = sess.run([expected, found.backward.d_pooled], {ids: IDS})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.abs(want).max() > 0


def test_untrained_table_has_no_backward() -> None:
    graph = tf.Graph()
    with graph.as_default():
        table = _table(False)
        pooled = tf.reduce_mean(tf.nn.embedding_lookup(table, IDS), axis=1)
    matches = pooled_lookups(graph, {"table": ps_device(0)}, {})
    (found,) = matches.pooled
    assert found.reduction is pooled.op and found.backward is None


def _refusal(make, **kwargs) -> str:
    _, _, _, matches = _build(make, **kwargs)
    assert matches.pooled == ()
    (reason,) = {r.reason for r in matches.refused}  # every gather of the lookup refused for one reason
    return reason


@pytest.mark.parametrize(("make", "reason"), [
    (lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS, max_norm=1.0), axis=1), MAX_NORM),
    (lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=2), OTHER_AXIS),
    (lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=[0, 1])[None], OTHER_AXIS),
    (lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS[:, :, None]), axis=1)[:, 0], RANK),
    (lambda t: tf.reduce_max(tf.nn.embedding_lookup(t, IDS), axis=1), OTHER_CONSUMER),
    (lambda t: (lambda rows: tf.reduce_mean(rows, axis=1) + tf.reduce_sum(rows ** 2))(
        tf.nn.embedding_lookup(t, IDS)), OTHER_CONSUMER),
    (lambda t: tf.nn.embedding_lookup_sparse(
        t, tf.SparseTensor(SPARSE[0], tf.constant(SPARSE[1], tf.int64), SPARSE[2]),
        tf.SparseTensor(SPARSE[0], tf.constant([1.0, 2.0, 0.5, 1.0, 3.0]), SPARSE[2]), combiner="mean"), WEIGHTED),
])
def test_refused_patterns_say_why(make, reason: str) -> None:
    assert _refusal(make) == reason


def test_table_off_the_ps_is_refused() -> None:
    assert _refusal(lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=1), on_ps=False) == NOT_ON_PS


@pytest.mark.parametrize("partitioned", [False, True])
def test_gradient_clipped_by_global_norm_is_refused(partitioned: bool) -> None:
    make = lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=1)  # noqa: E731
    assert _refusal(make, partitioned=partitioned, clip=True) == REDUCED_ON_THE_WAY


def test_lookup_in_control_flow_is_refused() -> None:
    graph = tf.Graph()
    with graph.as_default():
        table = _table(False)
        tf1.cond(tf.constant(True), lambda: tf.reduce_mean(tf.nn.embedding_lookup(table, IDS), axis=1),
                 lambda: tf.zeros([3, 4]))
        matches = pooled_lookups(graph, {"table": ps_device(0)}, {})
    assert matches.pooled == ()
    (refused,) = matches.refused
    assert refused.reason == CONTROL_FLOW and [op.type for op in refused.ops] in (["If"], ["StatelessIf"])


def test_table_looked_up_twice_is_refused() -> None:
    """Its gradient is the two lookups' IndexedSlices concatenated: no one reduction's gradient."""
    make = lambda t: (tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=1)  # noqa: E731
                      + tf.reduce_sum(tf.nn.embedding_lookup(t, IDS[::-1]), axis=1))
    assert _refusal(make) == GRADIENT_CHAIN


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_half_precision_table_is_refused(dtype) -> None:
    graph = tf.Graph()
    with graph.as_default():
        table = tf1.get_variable("table", [8, 4], dtype, use_resource=True)
        tf.reduce_mean(tf.nn.embedding_lookup(table, IDS), axis=1)
    matches = pooled_lookups(graph, {"table": ps_device(0)}, {})
    assert matches.pooled == () and [r.reason for r in matches.refused] == [DTYPE]


def test_graph_modes_registry_names_the_functions_that_build_the_matched_chains() -> None:
    """The matcher reads op chains TF's private code builds: a version that changes them is named."""
    from adrun.runtime.versions import GRAPH

    assert {"embedding_lookup_sparse", "embedding_lookup_sparse_impl", "_embedding_lookup_and_transform"} <= set(
        GRAPH.private["tensorflow.python.ops.embedding_ops"])
    assert {"_MeanGrad", "_SumGrad", "_SparseSegmentMeanGrad", "_SparseSegmentSumGrad", "_SparseSegmentSqrtNGrad"} <= set(
        GRAPH.private["tensorflow.python.ops.math_grad"])
    assert "_GatherGrad" in GRAPH.private["tensorflow.python.ops.resource_variable_ops"]
    assert "_DynamicStitchGrads" in GRAPH.private["tensorflow.python.ops.data_flow_grad"]
