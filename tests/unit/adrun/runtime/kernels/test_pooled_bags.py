"""Pooled lookups on small graph-mode graphs: the pooled forward equals TF's own reduction of the
gathered rows, each shard's gradient formed from d_sum equals the rows `merged_rows` forms from TF's
IndexedSlices (indices and values), and the decision made at apply_gradients holds at set-up.

Cases: repeated ids within a bag and across bags, every id on one shard, a shard no id reaches,
keep_dims, embedding_lookup_sparse with an empty bag (mean and sqrtn divide it by nothing).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.grads import GradientRecord, records_for  # noqa: E402
from adrun.runtime.kernels.devices import ps_device  # noqa: E402
from adrun.runtime.kernels.distinct_rows import merged_rows  # noqa: E402
from adrun.runtime.kernels.pooled_bags import (  # noqa: E402
    bag_index, pool_forward, pool_gradients, pool_lookups, pooled_gradients, pooled_variables,
)
from adrun.runtime.kernels.pooled_lookups import pooled_lookups  # noqa: E402

ROWS, DIM, SHARDS = 9, 4, 3  # fixed_size_partitioner(3) of 9 rows: shard k holds rows 3k..3k+2
IDS = np.array([[3, 1, 3, 7], [7, 7, 0, 3], [1, 1, 1, 1]])  # repeated ids within and across bags
ONE_SHARD = np.array([[1, 0], [2, 2]])  # every id on shard 0; shards 1 and 2 get none
SPARSE = ([[0, 0], [0, 1], [0, 2], [2, 0], [2, 1], [3, 0]], [3, 1, 3, 7, 7, 8], [4, 3])  # bag 1 empty
WORKER = ""


def _table(partitioned: bool):
    partitioner = tf1.fixed_size_partitioner(SHARDS) if partitioned else None
    return tf1.get_variable("table", [ROWS, DIM], initializer=tf1.random_normal_initializer(seed=1),
                            partitioner=partitioner, use_resource=True)


def _sparse_ids():
    return tf.SparseTensor(SPARSE[0], tf.constant(SPARSE[1], tf.int64), SPARSE[2])


def _names(graph) -> dict[str, str]:
    with graph.as_default():
        return {v.op.name: ps_device(0) for v in tf1.global_variables()}


LOOKUPS: dict[str, Callable] = {
    "mean": lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=1),
    "sum": lambda t: tf.reduce_sum(tf.nn.embedding_lookup(t, IDS), axis=1),
    "mean-keep-dims": lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, IDS), axis=1, keepdims=True),
    "one-shard": lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, ONE_SHARD), axis=1),
    # batch unknown when the graph is built: TF's gradient broadcasts instead of tiling
    "fed-mean": lambda t: tf.reduce_mean(tf.nn.embedding_lookup(t, tf1.placeholder(tf.int64, [None, 4], "fed_ids")), 1),
    "fed-sum": lambda t: tf.reduce_sum(tf.nn.embedding_lookup(t, tf1.placeholder(tf.int64, [None, None], "fed_ids")), 1),
    "sparse-mean": lambda t: tf.nn.embedding_lookup_sparse(t, _sparse_ids(), None, combiner="mean"),
    "sparse-sum": lambda t: tf.nn.embedding_lookup_sparse(t, _sparse_ids(), None, combiner="sum"),
    "sparse-sqrtn": lambda t: tf.nn.embedding_lookup_sparse(t, _sparse_ids(), None, combiner="sqrtn"),
}
CASES = [(name, partitioned) for name in LOOKUPS for partitioned in (False, True) if not name.startswith("sparse")
         or not partitioned]


def _build(name: str, partitioned: bool):
    """(graph, pooled tensor as the script made it, loss, the (gradient, variable) pairs)."""
    graph = tf.Graph()
    with graph.as_default():
        pooled = LOOKUPS[name](_table(partitioned))
        weights = tf.constant(np.linspace(0.5, 2.0, DIM, dtype=np.float32))
        loss = tf.reduce_sum(tf.sin(pooled) * weights)
        pairs = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
    return graph, pooled, loss, pairs


def _run(graph, fetches):
    fed = [op.outputs[0] for op in graph.get_operations() if op.name == "fed_ids"]
    with graph.as_default(), tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        return sess.run(fetches, {t: IDS for t in fed})


@pytest.mark.parametrize(("name", "partitioned"), CASES)
def test_pooled_forward_equals_the_reduction(name: str, partitioned: bool) -> None:
    graph, pooled, loss, _ = _build(name, partitioned)
    want_pooled, want_loss = _run(graph, [pooled, loss])
    (lookup,) = pooled_lookups(graph, _names(graph), {}).pooled
    with graph.as_default():
        new = pool_forward(lookup, bag_index(lookup, WORKER), WORKER)
    got_pooled, got_loss = _run(graph, [new, loss])
    assert got_pooled.shape == want_pooled.shape
    np.testing.assert_allclose(got_pooled, want_pooled, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
    # the script's loss now reads the pooled tensor, and no consumer is left on the reduction
    assert pooled.consumers() == []
    assert new.op.name.startswith("adrun_pooled_lookup")
    if name.startswith("sparse"):
        assert np.all(want_pooled[1] == 0), "the empty bag"


@pytest.mark.parametrize(("name", "partitioned"), CASES)
def test_shard_gradients_equal_merged_rows(name: str, partitioned: bool) -> None:
    graph, _, _, pairs = _build(name, partitioned)
    gradients = {v.op.name: g for g, v in pairs}
    (lookup,) = pooled_lookups(graph, _names(graph), gradients).pooled
    with graph.as_default():
        pooled = pooled_gradients(lookup, bag_index(lookup, WORKER), WORKER)
        merged = {shard: merged_rows(gradients[shard], WORKER) for shard in pooled}
    assert set(pooled) == set(gradients)
    got, want = _run(graph, [pooled, merged])
    touched = 0
    for shard in pooled:
        np.testing.assert_array_equal(got[shard].indices, want[shard].indices)
        np.testing.assert_allclose(got[shard].values, want[shard].values, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[shard].dense_shape, want[shard].dense_shape)
        touched += len(got[shard].indices)
    assert touched > 0
    if name == "one-shard" and partitioned:  # shards 1 and 2: no id this step, no row
        assert [len(got[f"table/part_{k}"].indices) for k in range(SHARDS)] == [3, 0, 0]


def test_apply_time_decision_holds_at_set_up() -> None:
    """pool_gradients pools the trained lookup and records it; pool_lookups then builds its forward
    (and reports the gathers it replaced); a table refused at apply time keeps today's path."""
    graph, pooled, loss, pairs = _build("mean", True)
    want = _run(graph, loss)
    with graph.as_default():
        records_for(graph).calls.append(GradientRecord(None, pairs))
        grads = pool_gradients(graph, pairs, _names(graph), lambda _: True, WORKER)
    assert set(grads) == {f"table/part_{k}" for k in range(SHARDS)}
    assert pooled_variables(graph) == set(grads)
    replaced = pool_lookups(graph, _names(graph), lambda _: True, WORKER)
    assert len(replaced) == SHARDS and all(graph.get_operation_by_name(n).type == "ResourceGather" for n in replaced)
    assert pooled.consumers() == []
    np.testing.assert_allclose(_run(graph, loss), want, rtol=1e-6)


def test_a_shard_that_cannot_pool_keeps_the_whole_lookup_on_todays_path() -> None:
    graph, pooled, _, pairs = _build("mean", True)
    with graph.as_default():
        records_for(graph).calls.append(GradientRecord(None, pairs))
        grads = pool_gradients(graph, pairs, _names(graph), lambda shard: shard != "table/part_1", WORKER)
    assert grads == {} and pooled_variables(graph) == set()
    assert pool_lookups(graph, _names(graph), lambda _: True, WORKER) == set()
    assert pooled.consumers() != []


def test_untrained_lookup_is_decided_at_set_up() -> None:
    graph = tf.Graph()
    with graph.as_default():
        pooled = LOOKUPS["mean"](_table(False))
    assert pool_lookups(graph, _names(graph), lambda _: False, WORKER) == set()
    other = tf.Graph()
    with other.as_default():
        pooled = LOOKUPS["mean"](_table(False))
        doubled = pooled * 2.0
    want = _run(other, doubled)
    assert len(pool_lookups(other, _names(other), lambda _: True, WORKER)) == 1
    assert pooled_variables(other) == {"table"}
    np.testing.assert_allclose(_run(other, doubled), want, rtol=1e-6)
