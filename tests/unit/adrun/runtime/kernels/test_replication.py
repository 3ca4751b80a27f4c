"""In-graph replication kernel, in one local session on virtual CPU devices.

The oracle: the combined gradient of K replicas on slices of a batch equals the gradient of the
whole batch (mean loss), for even and uneven splits and batches smaller than K; merged fetches
equal the unreplicated values; ops built on replicated tensors see whole-batch values.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.kernels.replication import (  # noqa: E402
    ReplicationError,
    relax_batch_dimension,
    replicate,
    replication_of,
)

DEVICES = 3


def _config() -> tf1.ConfigProto:
    return tf1.ConfigProto(device_count={"CPU": DEVICES})


def _model(graph: tf.Graph):
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        ids = tf1.placeholder(tf.int64, [None, 2], name="ids")
        y = tf1.placeholder(tf.float32, [None, 3], name="y")
        emb = tf1.get_variable("emb", [10, 4], initializer=tf1.random_normal_initializer(seed=1))
        w = tf1.get_variable("w", [4, 3], initializer=tf1.random_normal_initializer(seed=2))
        features = x + tf.reduce_mean(tf.nn.embedding_lookup(emb, ids), axis=1)
        pred = tf.matmul(tf.tanh(features), w)
        loss = tf.reduce_mean(tf.square(pred - y))
        hits = tf.reduce_sum(tf.cast(pred > 0, tf.int32))  # an integer count: merged by summing
        grads_and_vars = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(loss, [emb, w])
        init = tf1.global_variables_initializer()
    return (x, ids, y), pred, loss, hits, grads_and_vars, init


def _feed(inputs, rows: int) -> dict:
    rng = np.random.default_rng(rows)
    x, ids, y = inputs
    return {
        x: rng.normal(size=(rows, 4)).astype(np.float32),
        ids: rng.integers(0, 10, size=(rows, 2)),
        y: rng.normal(size=(rows, 3)).astype(np.float32),
    }


def _dense(value) -> np.ndarray:
    if hasattr(value, "indices"):  # an IndexedSlicesValue
        out = np.zeros(value.dense_shape, value.values.dtype)
        np.add.at(out, value.indices, value.values)
        return out
    return value


def _run(rows: int, replicated: bool) -> tuple[dict, list]:
    graph = tf.Graph()
    inputs, pred, loss, hits, grads_and_vars, init = _model(graph)
    with graph.as_default():
        total = tf.identity(loss * 2.0, name="built_on_loss")  # outside the replicated region
    grads = [g for g, _ in grads_and_vars]
    fetches = {"grads": grads, "pred": pred, "loss": loss, "hits": hits, "total": total}
    replica_preds = [pred]
    if replicated:
        with graph.as_default():
            combined = replicate(graph, grads_and_vars, [f"/device:CPU:{k}" for k in range(DEVICES)])
        replication = replication_of(graph)
        replication.rewire_consumers()
        fetches = replication.merged_fetches({**fetches, "grads": [g for g, _ in combined]})
        replica_preds = replication.replica_tensors(pred)
    with tf1.Session(graph=graph, config=_config()) as sess:
        sess.run(init)
        feed = _feed(inputs, rows)
        return sess.run(fetches, feed), sess.run(replica_preds, feed)


@pytest.mark.parametrize("rows", [9, 8, 2])  # even, uneven, fewer rows than replicas
def test_combined_gradient_and_merged_fetches_equal_whole_batch(rows: int) -> None:
    want, _ = _run(rows, replicated=False)
    got, replica_preds = _run(rows, replicated=True)
    for want_grad, got_grad in zip(want["grads"], got["grads"], strict=True):
        np.testing.assert_allclose(_dense(got_grad), _dense(want_grad), rtol=1e-5, atol=1e-6)
    assert hasattr(got["grads"][0], "indices")  # the embedding gradient stays sparse
    np.testing.assert_allclose(got["pred"], want["pred"], rtol=1e-6)
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)
    np.testing.assert_allclose(got["total"], want["total"], rtol=1e-5)
    assert got["hits"] == want["hits"]
    # each replica computed its own slice, uneven remainders first (numpy.array_split's sizes)
    assert [len(p) for p in replica_preds] == [len(part) for part in np.array_split(np.arange(rows), DEVICES)]


def test_replicas_run_on_their_devices() -> None:
    graph = tf.Graph()
    inputs, pred, _, _, grads_and_vars, init = _model(graph)
    with graph.as_default():
        combined = replicate(graph, grads_and_vars, [f"/device:CPU:{k}" for k in range(DEVICES)])
    matmuls = [t.op.name for t in replication_of(graph).replica_tensors(pred)]
    metadata = tf1.RunMetadata()
    with tf1.Session(graph=graph, config=_config()) as sess:
        sess.run(init)
        sess.run([g for g, _ in combined], _feed(inputs, 6),
                 options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE), run_metadata=metadata)
    ran_on = {node.node_name: dev.device for dev in metadata.step_stats.dev_stats for node in dev.node_stats}
    assert [ran_on[name].rsplit("/", 1)[-1] for name in matmuls] == [f"device:CPU:{k}" for k in range(DEVICES)]


def test_no_batch_input_is_refused_with_the_reason() -> None:
    graph = tf.Graph()
    with graph.as_default():
        w = tf1.get_variable("w", [3])
        loss = tf.reduce_sum(tf.square(w - tf.random.normal([3])))
        grads_and_vars = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
        with pytest.raises(ReplicationError, match="no batch input"):
            replicate(graph, grads_and_vars, ["/device:CPU:0", "/device:CPU:1"])


def test_a_second_optimizer_step_is_refused() -> None:
    graph = tf.Graph()
    _, _, _, _, grads_and_vars, _ = _model(graph)
    with graph.as_default():
        replicate(graph, grads_and_vars, ["/device:CPU:0", "/device:CPU:1"])
        with pytest.raises(ReplicationError, match="one optimizer step"):
            replicate(graph, grads_and_vars, ["/device:CPU:0", "/device:CPU:1"])


def test_fetch_structures_keep_their_shape_and_any_keys() -> None:
    graph = tf.Graph()
    inputs, pred, loss, _, grads_and_vars, init = _model(graph)
    with graph.as_default():
        replicate(graph, grads_and_vars, [f"/device:CPU:{k}" for k in range(DEVICES)])
    hook = object()  # MonitoredSession keys its hooks' fetches by the hook object
    fetches = {"caller": (pred.name, [pred]), hook: {"loss": loss}}
    merged = replication_of(graph).merged_fetches(fetches)
    assert set(merged) == {"caller", hook}
    name, [tensor] = merged["caller"]
    assert name == tensor.name and tensor.op.type == "ConcatV2"
    assert merged[hook]["loss"] is loss  # outside the region: fetched as is


def test_relaxed_dataset_has_an_unknown_batch_size_and_the_same_data() -> None:
    graph = tf.Graph()
    with graph.as_default():
        data = tf.data.Dataset.from_tensor_slices({"x": np.arange(12.0).reshape(6, 2)}).batch(3, drop_remainder=True)
        relaxed = relax_batch_dimension(data)
        element = tf1.data.make_one_shot_iterator(relaxed).get_next()
        assert element["x"].shape.as_list() == [None, 2]
        with tf1.Session() as sess:
            np.testing.assert_array_equal(sess.run(element)["x"], [[0, 1], [2, 3], [4, 5]])
