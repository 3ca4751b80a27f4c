"""The distinct-rows kernel in one local session: same values, fewer rows gathered and pushed.

A lookup of a PS variable rewritten to gather distinct ids must give every consumer the same rows
as before (ids of any shape and int type, repeated); a merged gradient must densify to the same
gradient, with sorted distinct int64 indices; the lookup and its gradient share one ids tensor, and
a lookup whose gradient is not merged gathers its distinct ids unsorted.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.kernels.devices import ps_device  # noqa: E402
from adrun.runtime.kernels.distinct_rows import dedup_remote_lookups, merged_rows  # noqa: E402

LOCAL = "/job:localhost/replica:0/task:0/device:CPU:0"
IDS = np.array([[3, 1, 3, 7], [7, 7, 0, 3], [1, 1, 1, 1]])  # 12 lookups, 4 distinct ids


def _dense(value) -> np.ndarray:
    out = np.zeros(value.dense_shape, value.values.dtype)
    np.add.at(out, value.indices, value.values)
    return out


@pytest.mark.parametrize("id_dtype", [tf.int32, tf.int64])
def test_a_lookup_gathers_each_distinct_row_once_with_equal_values(id_dtype):
    graph = tf.Graph()
    with graph.as_default():
        ids = tf1.placeholder(id_dtype, [None, 4])
        emb = tf1.get_variable("emb", [10, 2], initializer=tf1.random_normal_initializer(seed=1))
        looked_up = tf.nn.embedding_lookup(emb, ids)
        loss = tf.reduce_sum(tf.square(looked_up))
        [grad] = tf1.gradients(loss, [emb])
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        before, grad_before = sess.run([loss, grad], {ids: IDS})
        assert dedup_remote_lookups(graph, {"emb": ps_device(0)}, LOCAL) == 1
        after, grad_after = sess.run([loss, grad], {ids: IDS})
        gathers = [op for op in graph.get_operations() if op.type == "ResourceGather" and "adrun" in op.name]
        [gathered_ids] = sess.run([gathers[0].inputs[1]], {ids: IDS})
    np.testing.assert_array_equal(gathered_ids, [3, 1, 7, 0])  # as first seen: no gradient is merged here
    assert not [op for op in graph.get_operations() if op.type in ("TopKV2", "InvertPermutation")]  # so no sort
    assert after == pytest.approx(before)
    np.testing.assert_allclose(_dense(grad_after), _dense(grad_before))


def test_lookups_of_local_variables_or_used_on_the_ps_stay():
    graph = tf.Graph()
    with graph.as_default():
        ids = tf1.placeholder(tf.int64, [None])
        local = tf1.get_variable("local", [10, 2])
        clipped = tf1.get_variable("clipped", [10, 2])
        tf.nn.embedding_lookup(local, ids)
        tf1.nn.embedding_lookup(clipped, ids, max_norm=1.0)  # clipped next to the variable, on the PS
    devices = {"local": LOCAL, "clipped": ps_device(0)}
    assert dedup_remote_lookups(graph, devices, LOCAL) == 0


def test_a_merged_gradient_sums_equal_rows_and_shares_the_lookups_ids():
    graph = tf.Graph()
    with graph.as_default():
        ids = tf1.placeholder(tf.int64, [None, 4])
        emb = tf1.get_variable("emb", [10, 2])
        loss = tf.reduce_sum(tf.square(tf.nn.embedding_lookup(emb, ids)))
        [grad] = tf1.gradients(loss, [emb])
        merged = merged_rows(grad, LOCAL)
        dedup_remote_lookups(graph, {"emb": ps_device(0)}, LOCAL)
        init = tf1.global_variables_initializer()
    [gather] = [op for op in graph.get_operations() if op.type == "ResourceGather" and "adrun" in op.name]
    assert gather.inputs[1] is merged.indices  # the ids cross to the PS once for the pull and the push
    assert len([op for op in graph.get_operations() if op.type == "Unique"]) == 1
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        raw, value = sess.run([grad, merged], {ids: IDS})
    np.testing.assert_array_equal(value.indices, [0, 1, 3, 7])
    np.testing.assert_allclose(_dense(value), _dense(raw), rtol=1e-6)
