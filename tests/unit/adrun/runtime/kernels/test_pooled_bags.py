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
from adrun.runtime.kernels.pooled_lookups import MAX_NORM, REDUCED_ON_THE_WAY, pooled_lookups  # noqa: E402

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


TRAIN_IDS = np.array([[3, 1, 3, 7], [7, 7, 0, 3]])
EVAL_IDS = np.array([[0, 0, 0, 0], [8, 8, 8, 8], [2, 2, 2, 2]])


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_second_lookup_of_a_trained_table_does_not_take_its_gradient(partitioned: bool) -> None:
    """An eval lookup of the trained table, outside the loss: the pooled gradient is the trained
    lookup's (TF's merged rows of the train ids), never one formed on the eval lookup's ids."""
    graph = tf.Graph()
    with graph.as_default():
        table = _table(partitioned)
        train = tf.reduce_mean(tf.nn.embedding_lookup(table, TRAIN_IDS), axis=1)
        evaluated = tf.reduce_mean(tf.nn.embedding_lookup(table, EVAL_IDS), axis=1)
        loss = tf.reduce_sum(tf.sin(train))
        pairs = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
        gradients = {v.op.name: g for g, v in pairs}
        records_for(graph).calls.append(GradientRecord(None, pairs))
        grads = pool_gradients(graph, pairs, _names(graph), lambda _: True, WORKER)
        merged = {shard: merged_rows(gradients[shard], WORKER) for shard in gradients}
    assert set(grads) == set(gradients)
    want_eval = _run(graph, evaluated)
    got, want = _run(graph, [grads, merged])
    for shard in grads:
        np.testing.assert_array_equal(got[shard].indices, want[shard].indices)
        np.testing.assert_allclose(got[shard].values, want[shard].values, rtol=1e-5, atol=1e-6)
    assert sorted(np.concatenate([got[s].indices + (3 * int(s[-1]) if partitioned else 0) for s in got])) == [0, 1, 3, 7]
    # the eval lookup keeps today's path (its table is trained by another lookup); its values are TF's
    pool_lookups(graph, _names(graph), lambda _: True, WORKER)
    np.testing.assert_allclose(_run(graph, evaluated), want_eval, rtol=1e-6)


def test_two_lookups_claiming_one_gradient_are_both_left_alone() -> None:
    """Two lookups reading the very same ids tensor, one in the loss: the gradient's indices are
    both gathers' ids, so which lookup it belongs to is not known; neither is pooled."""
    graph = tf.Graph()
    with graph.as_default():
        table = _table(False)
        ids = tf.constant(TRAIN_IDS, tf.int64)
        train = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)
        tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1, name="eval_mean")
        pairs = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(tf.sin(train)))
        records_for(graph).calls.append(GradientRecord(None, pairs))
        assert pool_gradients(graph, pairs, _names(graph), lambda _: True, WORKER) == {}
    assert pooled_variables(graph) == set()


LONG_BAG = 600


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("sparse", [False, True])
def test_a_half_precision_table_keeps_tfs_own_sums(dtype: str, sparse: bool) -> None:
    """TF sums a bag of bfloat16 rows (and a sparse bag of float16 ones) in float32 and rounds once:
    sums taken in the table's dtype on the PS drift (a mean of 600 rows: 0.213 for TF's 0.301).
    Such a table is left to TF."""
    graph = tf.Graph()
    with graph.as_default():
        table = tf1.get_variable("table", [ROWS, DIM], getattr(tf, dtype), use_resource=True,
                                 initializer=tf1.random_uniform_initializer(0.0, 0.6, seed=1))
        ids = np.random.default_rng(0).integers(0, ROWS, size=(2, LONG_BAG))
        if sparse:
            indices = [[b, k] for b in range(2) for k in range(LONG_BAG)]
            pooled = tf.nn.embedding_lookup_sparse(
                table, tf.SparseTensor(indices, tf.constant(ids.reshape(-1), tf.int64), [2, LONG_BAG]), None,
                combiner="mean")
        else:
            pooled = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)
        out = tf.cast(pooled, tf.float32)
    want = _run(graph, out)
    with graph.as_default():
        wide = tf.reduce_mean(tf.cast(tf.nn.embedding_lookup(table, ids), tf.float32), axis=1)
    if dtype == "bfloat16":  # TF's own mean is the accurate one (a float16 Mean sums in yet another order)
        np.testing.assert_allclose(want, _run(graph, wide), rtol=1e-2)
    assert pool_lookups(graph, _names(graph), lambda _: True, WORKER) == set()
    np.testing.assert_array_equal(_run(graph, out), want)


def test_unordered_sparse_ids_raise_as_tfs_own_lookup_does() -> None:
    """An unordered SparseTensor's segment ids decrease: TF's SparseSegmentMean raises
    InvalidArgumentError, and so does the pooled lookup, never returning sums of misread bags."""
    graph = tf.Graph()
    with graph.as_default():
        sp = tf.SparseTensor([[2, 0], [0, 0], [0, 1]], tf.constant([3, 1, 7], tf.int64), [3, 2])
        pooled = tf.nn.embedding_lookup_sparse(_table(False), sp, None, combiner="mean")
        doubled = pooled * 2.0
    with pytest.raises(tf.errors.InvalidArgumentError):
        _run(graph, doubled)
    assert len(pool_lookups(graph, _names(graph), lambda _: True, WORKER)) == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match="segment ids are not increasing"):
        _run(graph, doubled)


def test_refusals_reach_the_user_once_at_set_up(capsys) -> None:
    """Why a lookup of a PS table keeps the rows path is written once per graph at set-up: the
    refusals seen at apply_gradients (a clipped gradient) and at set-up (max_norm) alike."""
    graph = tf.Graph()
    with graph.as_default():
        table = _table(False)
        clipped = tf.reduce_mean(tf.nn.embedding_lookup(table, IDS), axis=1)
        other = tf1.get_variable("other", [ROWS, DIM], use_resource=True)
        tf.reduce_mean(tf.nn.embedding_lookup(other, IDS, max_norm=1.0), axis=1)
        pairs = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(tf.sin(clipped)),
                                                                          var_list=[table])
        grads, _ = tf.clip_by_global_norm([g for g, _ in pairs], 1.0)
        pairs = list(zip(grads, [v for _, v in pairs], strict=True))
        records_for(graph).calls.append(GradientRecord(None, pairs))
        assert pool_gradients(graph, pairs, _names(graph), lambda _: True, WORKER) == {}
    assert capsys.readouterr().err == ""
    assert pool_lookups(graph, _names(graph), lambda _: True, WORKER) == set()
    pool_lookups(graph, _names(graph), lambda _: True, WORKER)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("adrun: ")]
    assert len(lines) == 2
    assert any("of other is not pooled" in line and MAX_NORM in line for line in lines)
    assert any("of table is not pooled" in line and REDUCED_ON_THE_WAY in line for line in lines)


def test_no_refusal_is_written_where_nothing_would_pool(capsys) -> None:
    graph = tf.Graph()
    with graph.as_default():
        tf.reduce_mean(tf.nn.embedding_lookup(_table(False), IDS, max_norm=1.0), axis=1)
    pool_lookups(graph, _names(graph), lambda _: False, WORKER)
    assert "adrun: " not in capsys.readouterr().err
