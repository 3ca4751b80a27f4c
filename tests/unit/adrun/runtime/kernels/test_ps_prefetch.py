"""A prefetched PS variable (`ps_prefetch.PrefetchedVariable`): the forward pass reads a cache on
the worker, and a read always sees the PS variable's exact value, whether the cache was pulled
after the last update or the variable changed behind its back (an assign, a restore), with
nothing resent when the cache is current. One local session plays the PS and the worker."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

from adrun.runtime.kernels import ps_prefetch  # noqa: E402
from adrun.runtime.kernels.ps_prefetch import PrefetchedVariable, chunks  # noqa: E402

LOCAL = "/job:localhost/replica:0/task:0/device:CPU:0"  # a plain session's only device


class Step:
    """A variable `w` read by a forward pass, updated by SGD, prefetched as the chief does."""

    def __init__(self, initial: np.ndarray, update_after_forward: bool = True) -> None:
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.w = tf1.get_variable("w", initializer=tf.constant(initial), use_resource=True)
            self.forward = self.w.read_value() * 1.0  # the model's read
            self.prefetched = PrefetchedVariable(self.w, "w", LOCAL, LOCAL, worker=0, num_workers=1)
            # the update follows the forward pass, as in a real step (its gradients need it); without
            # that, the train op runs the forward's check (its reads are the pull's) beside the pull
            with tf.control_dependencies([self.forward.op] if update_after_forward else []):
                update = self.w.assign_sub(tf.ones_like(initial), read_value=False)
            self.train = tf.group(*self.prefetched.chief_after_update([update]))
            self.assign = self.w.assign(tf1.placeholder(tf.float32, initial.shape, name="value"), read_value=False)
            self.init = [tf1.global_variables_initializer(), *self.prefetched.initializers]
        self.session = tf1.Session(graph=self.graph)
        self.session.run(self.init)

    def read(self) -> tuple[np.ndarray, int]:
        """The forward read, and how many values the PS resent for it."""
        value, resent = self.session.run([self.forward, self.prefetched.resent])
        return value, resent.size


def test_reads_see_the_variable_and_nothing_is_resent_while_the_cache_is_current():
    step = Step(np.arange(6, dtype=np.float32).reshape(2, 3))
    value, resent = step.read()
    np.testing.assert_array_equal(value, np.arange(6).reshape(2, 3))
    assert resent == 6  # the first read: the cache held zeros
    step.session.run(step.train)  # update, then the pull into the cache
    value, resent = step.read()
    np.testing.assert_array_equal(value, np.arange(6).reshape(2, 3) - 1)
    assert resent == 0


def test_a_check_run_beside_the_pull_leaves_the_shadow_as_the_pull_wrote_it():
    """The train op runs the forward's check beside the update and the pull: were the check's
    compare-and-resend to interleave with the pull's shadow write (a read of the old value, a write
    of it over the pulled shadow), the next read would resend the whole variable. The pull's shadow
    write follows the check, so it never does; the interleaving is a race, hence the many steps."""
    step = Step(np.arange(6, dtype=np.float32).reshape(2, 3), update_after_forward=False)
    step.read()
    resent = []
    for _ in range(300):
        step.session.run(step.train)
        resent.append(step.read()[1])
    value, _ = step.read()
    np.testing.assert_array_equal(value, np.arange(6).reshape(2, 3) - 300)
    assert resent == [0] * 300


def test_the_pull_writes_the_shadow_only_after_the_check_wrote_it():
    step = Step(np.zeros((2, 3), np.float32), update_after_forward=False)
    writes = [op for op in step.graph.get_operations()
              if op.inputs and op.inputs[0].op.name == "adrun_prefetch/w/shadow_w0" and "Assign" in op.type]
    checked = [op for op in writes if op.type == "ResourceStridedSliceAssign"]
    pulled = [op for op in writes if op.type == "AssignVariableOp" and not op.name.startswith("adrun_prefetch/w/shadow_w0/")]
    assert len(checked) == 1 and len(pulled) == 1
    assert _runs_before(checked[0], pulled[0])


def _runs_before(first, then) -> bool:
    """Whether `then` waits for `first` (through its inputs and control inputs)."""
    seen, stack = set(), [then]
    while stack:
        current = stack.pop()
        for before in [t.op for t in current.inputs] + list(current.control_inputs):
            if before.name not in seen:
                seen.add(before.name)
                stack.append(before)
    return first.name in seen


def test_a_change_behind_the_cache_is_resent():
    step = Step(np.zeros((2, 3), np.float32))
    step.session.run(step.train)
    step.session.run(step.assign, {"value:0": np.full((2, 3), 7, np.float32)})  # e.g. a restore
    value, resent = step.read()
    np.testing.assert_array_equal(value, np.full((2, 3), 7))
    assert resent == 6


def test_the_check_compares_bits_not_values():
    # -0.0 == 0.0 as floats, but a cache of +0.0 does not hold a variable of -0.0
    step = Step(np.full((2, 2), -0.0, np.float32))
    value, _ = step.read()
    assert np.signbit(value).all()


def test_a_zero_variable_reads_the_zero_cache_exactly():
    step = Step(np.zeros((3,), np.float32))
    value, resent = step.read()
    np.testing.assert_array_equal(value, np.zeros(3))
    assert not np.signbit(value).any() and resent == 0


def test_only_shards_sharing_their_ps_task_are_prefetched():
    items = [("k/part_0", None, 0), ("k/part_1", None, 0), ("e/part_0", None, 0), ("e/part_1", None, 1), ("b", None, 0)]
    assert [name for name, _, _ in chunks(items)] == ["k/part_0", "k/part_1"]


def test_a_sparse_gradient_or_a_gather_is_not_prefetched():
    with tf.Graph().as_default():
        emb = tf1.get_variable("emb", [10, 2], use_resource=True)
        tf.gather(emb, [1, 2])
        dense = tf1.get_variable("dense", [2, 2], use_resource=True)
        dense.read_value()
        assert not ps_prefetch.prefetchable(emb, tf.zeros([2, 2]))  # read by a gather: rows, not the whole
        assert not ps_prefetch.prefetchable(dense, tf.IndexedSlices(tf.zeros([1, 2]), tf.constant([0])))
        assert ps_prefetch.prefetchable(dense, tf.zeros([2, 2]))
