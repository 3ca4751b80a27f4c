"""ADRUN_OP_TIMEOUT in TF2 mode (adrun/runtime/tf2/step_deadline.py): a step's collectives carry no
timeout of their own (TF would start a sleeping thread per call), and the step deadline aborts them
once, when one step has been running for the timeout."""

from __future__ import annotations

import tensorflow as tf

from adrun.runtime.tf2.keys import StepKeys
from adrun.runtime.tf2.reduction import TF2Collectives
from adrun.runtime.tf2.routes import Route, Routes
from adrun.runtime.tf2.step_deadline import StepDeadline
from adrun.strategies.document import AllReduceSync

LOCAL_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


class LocalRoutes(Routes):
    """Routes whose device is this test process's CPU (a worker's is /job:worker/task:i)."""

    def device(self, route: Route) -> str:
        return LOCAL_CPU


def test_a_traced_step_s_collectives_carry_no_timeout() -> None:
    routes = LocalRoutes(0)
    collectives = TF2Collectives(2, keys=StepKeys(LOCAL_CPU), routes=lambda: routes)

    @tf.function
    def step(dense: tf.Tensor, rows: tf.Tensor, ids: tf.Tensor) -> tuple:
        means = collectives.dense_means([("a", AllReduceSync(group=0), dense), ("b", AllReduceSync(group=0), 2 * dense)])
        grad = collectives.rows_to_gather(tf.IndexedSlices(rows, ids, tf.constant([10, 2], tf.int64)), True)
        gathered = collectives.sparse_rows("table", grad, None)
        return means, gathered.values

    graph = step.get_concrete_function(tf.TensorSpec([3]), tf.TensorSpec([None, 2]), tf.TensorSpec([None], tf.int64)).graph
    found = [op for op in graph.get_operations() if op.type in ("CollectiveReduceV2", "CollectiveGatherV2")]
    assert [op.type for op in found].count("CollectiveReduceV2") == 1  # both dense gradients in one buffer
    assert len(found) >= 2
    assert [op.get_attr("timeout_seconds") for op in found] == [0.0] * len(found)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _deadline(timeout_s: float) -> tuple[StepDeadline, Clock, list[float]]:
    clock, aborted = Clock(), []
    return StepDeadline(timeout_s, abort=aborted.append, clock=clock), clock, aborted


def test_a_step_running_for_the_timeout_is_aborted_once() -> None:
    deadline, clock, aborted = _deadline(3.0)
    deadline.observe(started=5, done=4)
    clock.now += 2.9
    deadline.observe(5, 4)
    assert aborted == []
    clock.now += 0.1
    deadline.observe(5, 4)
    assert aborted == [3.0]
    clock.now += 10
    deadline.observe(5, 4)
    assert aborted == [3.0]


def test_steps_that_finish_are_never_aborted_however_long_the_run() -> None:
    deadline, clock, aborted = _deadline(3.0)
    for step in range(1, 20):  # each step seen running for 2 s, then done
        deadline.observe(step, step - 1)
        clock.now += 2.0
        deadline.observe(step, step - 1)
        deadline.observe(step, step)
        clock.now += 2.0  # time between steps (input, callbacks) is not the collectives'
    assert aborted == []


def test_a_new_step_restarts_the_clock_and_zero_means_never() -> None:
    deadline, clock, aborted = _deadline(3.0)
    deadline.observe(5, 4)
    clock.now += 2.0
    deadline.observe(6, 5)  # step 5 ended between two reads, step 6 began
    clock.now += 2.0
    deadline.observe(6, 5)
    assert aborted == []

    never, clock, aborted = _deadline(0.0)
    never.observe(5, 4)
    clock.now += 1e6
    never.observe(5, 4)
    assert aborted == []
