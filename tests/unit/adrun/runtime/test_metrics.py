"""Which `run`s count as training steps, decided without a graph walk on every `run`.

adrun's `run` wrapper asks before every call whether the fetches run an optimizer step (a step op
fetched, or a control input of a fetched op). The answer depends only on the set of fetched op
names, so the graph is looked at the first time a set is seen; a new step op makes it look again.
"""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.grads import records_for  # noqa: E402
from adrun.runtime.metrics import StepReporter  # noqa: E402


@pytest.fixture
def lookups(monkeypatch):
    """How many times the graph was asked for an op by name."""
    calls = []
    original = tf.Graph.get_operation_by_name

    def counted(self, name):
        calls.append(name)
        return original(self, name)

    monkeypatch.setattr(tf.Graph, "get_operation_by_name", counted)
    return calls


def test_each_set_of_fetches_is_looked_up_once(lookups):
    with tf.Graph().as_default() as graph:
        x = tf1.get_variable("x", [])
        loss = tf.square(x)
        train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        with_metrics = tf.group(train_op, name="step_and_metrics")
    records_for(graph).add_train_op(train_op)

    for make_fetches, is_step in [
        (lambda: [loss], False),
        (lambda: {"caller": {"train": with_metrics}, "hook": [loss]}, True),  # MonitoredSession-like
        (lambda: train_op, True),
    ]:
        for run in range(3):  # a new but equal structure each time, as a training loop passes it
            before = len(lookups)
            assert StepReporter.is_training_step(graph, make_fetches()) is is_step
            if run:
                assert len(lookups) == before, f"run {run} of {make_fetches()} looked at the graph again"
    assert lookups, "the first sight of a set must look at the graph"


def test_a_new_step_op_is_seen(lookups):
    with tf.Graph().as_default() as graph:
        x = tf1.get_variable("x", [])
        first = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.square(x))
        later = tf.no_op(name="later")
    records = records_for(graph)
    records.add_train_op(first)
    assert not StepReporter.is_training_step(graph, [later])
    with graph.as_default():
        second = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.abs(x))
    later._add_control_input(second)
    records.add_train_op(second)
    assert StepReporter.is_training_step(graph, [later])


def test_steps_held_back_by_the_throttle_are_reported_once_the_worker_goes_quiet(monkeypatch):
    """A burst of steps and then a wait (a stalled peer): the launcher must learn the last count
    without another step, or its stall message names a step from before the burst."""
    import io
    import json
    import sys
    import time

    written = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", written)
    monkeypatch.setattr("atexit.register", lambda fn: fn)  # no report from this reporter when pytest exits
    with tf.Graph().as_default() as graph:
        reporter = StepReporter()
        for _ in range(5):
            reporter.after_step(graph, None, examples=4)

    def last_step() -> int:
        lines = [line for line in written.getvalue().splitlines() if line.startswith("@@ADRUN ")]
        return json.loads(lines[-1][len("@@ADRUN "):])["step"]

    assert last_step() == 1  # the throttle let the first step through, and held the others back
    while last_step() != 5:  # no further step comes; the test's timeout bounds the wait
        time.sleep(0.05)


def test_a_step_that_keeps_running_is_reported_as_waiting_once(monkeypatch):
    """A worker blocked inside a synchronous step says so (the launcher's stall message tells a
    worker waiting for its peers from one that holds them up); a step that ends says nothing."""
    import io
    import json
    import sys
    import time

    from adrun.runtime.metrics import WAITING_AFTER_S

    written = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", written)
    monkeypatch.setattr("atexit.register", lambda fn: fn)  # no report from this reporter when pytest exits
    with tf.Graph().as_default() as graph:
        reporter = StepReporter()
        reporter.before_step()
        reporter.after_step(graph, None, examples=4)  # a quick step: no waiting event
        began = time.time()
        reporter.before_step()  # ... and one that blocks

    def events(kind: str) -> list[dict]:
        lines = [line for line in written.getvalue().splitlines() if line.startswith("@@ADRUN ")]
        return [e for e in (json.loads(line[len("@@ADRUN "):]) for line in lines) if e["event"] == kind]

    while not events("waiting"):  # the test's timeout bounds the wait
        time.sleep(0.05)
    [waiting] = events("waiting")
    assert waiting["step"] == 1 and abs(waiting["since"] - began) < 1.0
    assert waiting["time"] - waiting["since"] >= WAITING_AFTER_S
    time.sleep(3 * WAITING_AFTER_S)  # let the reporter run on: it must not repeat itself
    assert len(events("waiting")) == 1


def _context(tmp_path, *, sync: str = "all_reduce", mode: str = "run", num_workers: int = 2,
             max_steps: int | None = 5, release_fd: int | None = 7):
    from adrun.env_vars import Settings
    from adrun.task_context import TaskContext
    from strategies.document import AllReduceSync, PSSync, Strategy, VariablePlan, strategy_to_yaml

    synchronizer = AllReduceSync(group=0) if sync == "all_reduce" else PSSync(ps_task=0)
    plan = Strategy(version=1, builder="x", fingerprint="f", num_workers=num_workers, num_ps=int(sync == "ps"),
                    variables=[VariablePlan(name="w", shape=[2], dtype="float32", grad="dense", sync=synchronizer)])
    path = tmp_path / "strategy.yml"
    path.write_text(strategy_to_yaml(plan))
    return TaskContext(mode=mode, role="worker", task_index=0, num_workers=num_workers, job_id="j", cluster={},
                       strategy_file=str(path), release_fd=release_fd, settings=Settings(max_steps=max_steps))


@pytest.mark.parametrize("changes,waits", [
    ({}, True),  # a bounded run, peers it all-reduces with: the finish barrier
    ({"sync": "ps"}, False),  # the PS outlives the workers
    ({"num_workers": 1}, False),  # no peer
    ({"max_steps": None}, False),  # no bound: the script ends the worker
    ({"release_fd": None}, False),  # started without a release pipe
    ({"mode": "capture"}, False),
])
def test_a_worker_waits_at_the_finish_barrier_only_when_a_peer_may_read_its_server(tmp_path, changes, waits):
    reporter = StepReporter.for_worker(_context(tmp_path, **changes))
    assert reporter.release_fd == (7 if waits else None)
    from adrun.env_vars import Settings

    assert reporter.release_limit_s == 2 * Settings().op_timeout_s
    assert reporter.max_steps == changes.get("max_steps", 5)
