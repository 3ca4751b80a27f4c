"""Capture records, per variable, what its lookups pooled over their bags read per step
(VariableInfo.pooled): by the runtime's matcher, every lookup of the table matched or none counted."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import inspect

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.graph_item import PooledBags  # noqa: E402
from adrun.runtime import patches  # noqa: E402
from adrun.runtime.capture import describe_graph  # noqa: E402
from adrun.runtime.kernels import pooled_lookups  # noqa: E402

BATCH, BAG = 6, 4


def _ids_of_a_dataset():
    """[BATCH, BAG] ids from a tf.data batch, as the benchmark's workloads read theirs."""
    rows = np.arange(60, dtype=np.int64).reshape(15, BAG) % 10
    ids = tf1.data.Dataset.from_tensor_slices(rows).repeat().batch(BATCH, drop_remainder=True)
    return tf1.data.make_one_shot_iterator(ids).get_next()


def _captured(monkeypatch, lookups: Callable[[object, object], object], partitioned: bool = False,
              separate_parts: int = 0, ids: Callable[[], object] | None = None, examples: int | None = None):
    """The GraphItem capture describes for a table of 10 x 3 read by `lookups(table, ids)` and a
    small head, trained by minimize through the capture-mode apply_gradients patch; with
    `separate_parts`, the table a Python list of that many variables `table_i`; `ids` makes the ids
    (a dataset's by default); `examples`, the batch the profiling run fed."""
    base = tf1.train.Optimizer
    monkeypatch.setattr(base, "apply_gradients", base.apply_gradients)  # restored after the test
    patches._patch_apply_gradients(base, SimpleNamespace(mode="capture"))
    graph = tf.Graph()
    with graph.as_default():
        partitioner = tf1.fixed_size_partitioner(3) if partitioned else None
        table = ([tf1.get_variable(f"table_{i}", [10 // separate_parts, 3]) for i in range(separate_parts)]
                 if separate_parts else tf1.get_variable("table", [10, 3], partitioner=partitioner))
        head = tf1.get_variable("head", [3, 1])
        pooled = lookups(table, (ids or _ids_of_a_dataset)())
        loss = tf.reduce_sum(tf.matmul(pooled, head) ** 2)
        tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return {v.name: v for v in describe_graph(graph, examples).variables}


def _mean(table, ids):
    return tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_mean_over_the_bag_records_the_examples_and_ids_of_a_step(monkeypatch, partitioned):
    variables = _captured(monkeypatch, _mean, partitioned)
    assert variables["table"].pooled == PooledBags(examples=BATCH, ids=BATCH * BAG)
    assert variables["table"].grad == "sparse"
    assert variables["head"].pooled is None


def test_a_sparse_lookup_records_the_examples_but_not_its_ids(monkeypatch):
    def sparse_mean(table, ids):
        return tf.nn.embedding_lookup_sparse(table, tf.sparse.from_dense(ids + 1), None, combiner="mean")

    assert _captured(monkeypatch, sparse_mean)["table"].pooled == PooledBags(examples=BATCH, ids=None)


def test_a_table_with_a_lookup_that_cannot_be_pooled_records_none(monkeypatch):
    def max_pooled(table, ids):
        return tf.reduce_max(tf.nn.embedding_lookup(table, ids), axis=1)

    def clipped(table, ids):
        return tf.reduce_mean(tf.nn.embedding_lookup(table, ids, max_norm=1.0), axis=1)

    assert _captured(monkeypatch, max_pooled)["table"].pooled is None
    assert _captured(monkeypatch, clipped)["table"].pooled is None


def test_a_table_with_one_matched_and_one_refused_lookup_records_none(monkeypatch):
    """The mean is matched; the max beside it (kept out of the gradient) is refused: its rows
    still cross, so the table records none."""
    def mean_and_max(table, ids):
        rows = tf.nn.embedding_lookup(table, ids)
        return tf.reduce_mean(rows, axis=1) + tf.stop_gradient(tf.reduce_max(tf.nn.embedding_lookup(table, ids), axis=1))

    assert _captured(monkeypatch, mean_and_max)["table"].pooled is None


def test_a_lookup_over_a_list_of_variables_records_each_of_them(monkeypatch):
    """`embedding_lookup([part0, part1], ids)`: the matcher pools it as it pools a partitioned
    table's lookup, so each variable returns [BATCH, dim] sums and takes half the ids."""
    variables = _captured(monkeypatch, _mean, separate_parts=2)
    assert variables["table_0"].pooled == variables["table_1"].pooled == PooledBags(examples=BATCH, ids=BATCH * BAG // 2)


# A batch unknown when the graph is built makes TF's Mean gradient broadcast d_pooled (BroadcastTo)
# rather than tile it; the matcher of branch poolrt reads that chain (the runtime then pools the
# lookup), the one before it refuses it (the table records none).
UNKNOWN_BATCH_MATCHED = "BroadcastTo" in inspect.getsource(pooled_lookups._dense_grad_source)


@pytest.mark.skipif(not UNKNOWN_BATCH_MATCHED, reason="this matcher refuses a lookup of unknown batch")
def test_a_lookup_of_unknown_batch_takes_the_profiling_runs_examples(monkeypatch):
    """Ids fed through placeholder([None, BAG]) (examples/embedding.py): capture alone does not
    know the examples (the cost model then counts rows); the profiling run gives its fed batch."""
    def fed():
        return tf1.placeholder(tf.int64, [None, BAG])

    assert _captured(monkeypatch, _mean, ids=fed)["table"].pooled == PooledBags(examples=None, ids=None)
    assert _captured(monkeypatch, _mean, ids=fed, examples=BATCH)["table"].pooled == PooledBags(
        examples=BATCH, ids=BATCH * BAG)
