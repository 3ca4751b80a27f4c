"""Which Sessions wait for their graph's model (adrun/runtime/pending_sessions.py), and why one on
an evaluation graph must not share this worker's server with the training graph."""

from __future__ import annotations

import socket

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.grads import GradientRecord, records_for  # noqa: E402
from adrun.runtime.pending_sessions import PENDING, SessionKind, session_kind, settle, wait_for_model  # noqa: E402

_server = None


def _shared_server() -> tf.distribute.Server:
    """One in-process gRPC server, as a worker has (TF cannot stop one: it lives with the process)."""
    global _server
    if _server is None:
        with socket.socket() as s:
            s.bind(("localhost", 0))
            port = s.getsockname()[1]
        _server = tf.distribute.Server(tf.train.ClusterSpec({"worker": [f"localhost:{port}"]}),
                                       job_name="worker", task_index=0)
    return _server


def _model(w_value: float):
    w = tf1.get_variable("w", [2], initializer=tf1.constant_initializer(w_value))
    counter = tf1.Variable(0, name="counter", use_resource=False)  # a ref variable
    return w, counter


def _training_replica(target: str):
    """A training graph whose variables live on this worker (as all-reduce replicas do), initialized;
    its session and what reads the variables."""
    graph = tf.Graph()
    with graph.as_default(), tf1.device("/job:worker/task:0"):
        w, counter = _model(1.0)
        init = tf1.global_variables_initializer()
        reads = [w.read_value(), counter.value()]
    sess = tf1.Session(target, graph=graph)
    sess.run(init)
    return sess, reads


def test_kinds():
    graph = tf.Graph()
    assert session_kind(graph) is SessionKind.PENDING
    with graph.as_default():
        dataset = tf.data.Dataset.range(4).batch(2)
        x = tf.cast(tf1.data.make_initializable_iterator(dataset).get_next(), tf.float32)
        assert session_kind(graph) is SessionKind.PENDING  # input only: the model may follow
        w, _ = _model(1.0)
        assert session_kind(graph) is SessionKind.LOCAL  # variables, no optimizer step: evaluation
        optimizer = tf1.train.GradientDescentOptimizer(0.1)
        pairs = optimizer.compute_gradients(tf.reduce_sum(x[:2] * w), [w])
        records_for(graph).calls.append(GradientRecord(optimizer, pairs))  # what the apply_gradients patch records
        assert session_kind(graph) is SessionKind.TRAINING


def test_pending_until_the_graph_has_variables_or_an_optimizer_step():
    graph = tf.Graph()
    with graph.as_default():
        iterator = tf1.data.make_initializable_iterator(tf.data.Dataset.range(3))
    with tf1.Session(graph=graph) as sess:
        wait_for_model(sess)
        assert settle(sess) is SessionKind.PENDING and sess in PENDING
        sess.run(iterator.initializer)
        with graph.as_default():
            w, _ = _model(0.0)
        assert settle(sess) is SessionKind.LOCAL and sess not in PENDING
        assert w.op.get_attr("container").startswith(b"adrun-local-")
        assert iterator._iterator_resource.op.get_attr("container") == b""  # already sent: untouched


def test_an_evaluation_graph_on_the_workers_server_would_share_the_training_variables():
    """The reason such a graph's Session stays local: same names on one server are one resource."""
    target = _shared_server().target
    _training_replica(target)
    evaluation = tf.Graph()
    with evaluation.as_default():
        w, counter = _model(0.0)
    with tf1.Session(target, graph=evaluation) as sess:
        np.testing.assert_array_equal(sess.run(w.read_value()), [1.0, 1.0])  # never initialized here


def test_a_pending_session_that_turns_out_to_evaluate_keeps_its_own_variables():
    target = _shared_server().target
    training, training_reads = _training_replica(target)
    evaluation = tf.Graph()
    with tf1.Session(target, graph=evaluation) as sess:
        wait_for_model(sess)
        with evaluation.as_default():
            w, counter = _model(0.0)
        assert settle(sess) is SessionKind.LOCAL
        with evaluation.as_default():
            later = tf1.get_variable("later", [1])  # created after the decision: private too
            sess.run(tf1.global_variables_initializer())
            sess.run(counter.assign_add(5))  # one run with the initializer would race it
        assert later.op.get_attr("container") == w.op.get_attr("container")
        np.testing.assert_array_equal(sess.run(w.read_value()), [0.0, 0.0])
        assert sess.run(counter) == 5
    w_value, counter_value = training.run(training_reads)
    np.testing.assert_array_equal(w_value, [1.0, 1.0])
    assert counter_value == 0
