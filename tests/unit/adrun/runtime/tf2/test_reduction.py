"""What a TF2 worker's sparse all-gather sends (adrun/runtime/tf2/reduction.py): its rows summed per
index for an optimizer that takes only the sums, every row otherwise; the mean is the same. Its row
count rides with the apply's check, as one more number of that small gather."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from adrun.runtime.tf2.duplicate_rows import summed_per_index
from adrun.runtime.tf2.reduction import TF2Collectives, mean_gradients
from adrun.spec import ClusterSpec, Node
from adrun.strategies.document import AllReduceSync, Strategy, VariablePlan
from adrun.strategies.wire_bound import lower_bound

TABLE = VariablePlan(name="table", shape=[5, 2], dtype="float32", grad="sparse", sync=AllReduceSync(group=0))


class TwoSameWorkers(TF2Collectives):
    """Two workers with the same gradient: a gather is this worker's tensor twice; records what it sends."""

    def __init__(self) -> None:
        super().__init__(num_workers=2, count_slots=1)
        self.sent: dict[str, tuple[int, ...]] = {}

    def gather(self, t: tf.Tensor, label: str, step: Any = None) -> tf.Tensor:
        self.sent[label.rsplit("/", 1)[1]] = tuple(t.shape)
        return tf.concat([t, t], axis=0)


def _grad() -> tf.IndexedSlices:
    values = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    return tf.IndexedSlices(values, tf.constant([3, 1, 3, 3], tf.int64), tf.constant([5, 2], tf.int64))


def test_summed_per_index_keeps_one_row_per_index_with_their_sum() -> None:
    summed = summed_per_index(_grad())
    assert summed.indices.numpy().tolist() == [3, 1]
    assert summed.values.numpy().tolist() == [[13.0, 16.0], [3.0, 4.0]]


def test_the_gather_sends_distinct_rows_only_when_asked_and_the_mean_is_the_same() -> None:
    means = {}
    for sum_per_index in (False, True):
        collectives = TwoSameWorkers()
        [mean], _ = mean_gradients(collectives, [(TABLE, _grad())], sum_per_index, "table (sparse)")
        rows = 2 if sum_per_index else 4
        assert collectives.sent == {"same_step": (2,), "indices": (rows,), "values": (rows, 2)}  # hash and count
        means[sum_per_index] = tf.convert_to_tensor(mean).numpy()
    np.testing.assert_array_equal(means[True], means[False])
    np.testing.assert_array_equal(means[True], tf.convert_to_tensor(_grad()).numpy())  # the mean of two equal workers


class RecordingTwoSameWorkers(TwoSameWorkers):
    """TwoSameWorkers that also records each all-reduce: (label, bytes of its input)."""

    def __init__(self) -> None:
        super().__init__()
        self.reduced: list[tuple[str, int]] = []
        self.gathered: list[tuple[str, int]] = []

    def _reduce(self, t: tf.Tensor, label: str, final_op: str) -> tf.Tensor:
        self.reduced.append((label, t.shape.num_elements() * t.dtype.size))
        return t * 2 if final_op == "Id" else t  # the sum, or the mean, of two equal workers

    def gather(self, t: tf.Tensor, label: str, step: Any = None) -> tf.Tensor:
        self.gathered.append((label, t.shape.num_elements() * t.dtype.size))
        return super().gather(t, label, step)


def test_powersgd_and_fp16_plan_on_two_workers_sends_the_bound_in_six_collectives() -> None:
    """The TF2 sparse Keras benchmark's plan with allow_lossy (bench/results/plans/, 2 workers): PowerSGD
    rank 4 on both kernels, fp16 on both biases, the embedding all-gathered. On two workers a ring
    all-reduce sends each worker's whole buffer once and a gather its own rows, so what a worker hands
    its collectives is what it sends: exactly strategies/wire_bound.py's bound (27,728 B of factors
    and half-precision biases, 264 B per distinct row) and the 16 B of the apply's check. Both
    kernels' P go in one all-reduce and their Q in another (four all-reduces before: four more
    messages and their framing a step)."""
    rank = 4
    syncs = {"powersgd": AllReduceSync(group=0, compressor="powersgd", powersgd_rank=rank),
             "fp16": AllReduceSync(group=0, compressor="fp16")}
    plans = [VariablePlan(name="sequential/embedding/embeddings", shape=[200_000, 64], dtype="float32", grad="sparse",
                          sync=AllReduceSync(group=0)),
             VariablePlan(name="sequential/hidden/kernel", shape=[64, 256], dtype="float32", grad="dense", sync=syncs["powersgd"]),
             VariablePlan(name="sequential/hidden/bias", shape=[256], dtype="float32", grad="dense", sync=syncs["fp16"]),
             VariablePlan(name="sequential/logits/kernel", shape=[256, 1000], dtype="float32", grad="dense", sync=syncs["powersgd"]),
             VariablePlan(name="sequential/logits/bias", shape=[1000], dtype="float32", grad="dense", sync=syncs["fp16"])]
    rows = 1098
    rng = np.random.default_rng(0)
    grads: list[Any] = [tf.IndexedSlices(tf.constant(rng.normal(size=(rows, 64)), tf.float32),
                                         tf.constant(rng.choice(200_000, rows, replace=False), tf.int64),
                                         tf.constant([200_000, 64], tf.int64))]
    grads += [tf.constant(rng.normal(size=p.shape), tf.float32) for p in plans[1:]]
    collectives = RecordingTwoSameWorkers()
    mean_gradients(collectives, list(zip(plans, grads, strict=True)), True, "the plan's five variables")

    strategy = Strategy(version=1, builder="Auto", fingerprint="f", num_workers=2, num_ps=0, variables=plans)
    spec = ClusterSpec(version=1, nodes=[Node(address=f"10.0.0.{i}", chief=i == 1, workers=1) for i in (1, 2)])
    bound = lower_bound(strategy, {plans[0].name: [rows, rows]}, spec).per_host["10.0.0.1"].sent
    assert bound == 27_728 + rows * (64 * 4 + 8) == 317_600
    kernels, biases = "sequential/hidden/kernel,sequential/logits/kernel", "sequential/hidden/bias,sequential/logits/bias"
    assert [label for label, _ in collectives.reduced] == [f"adrun/powersgd/0/float32/{kernels}/p",
                                                           f"adrun/powersgd/0/float32/{kernels}/q",
                                                           f"adrun/allreduce/0/float32/fp16/{biases}"]
    assert [nbytes for _, nbytes in collectives.reduced] == [(64 + 256) * rank * 4, (256 + 1000) * rank * 4, (256 + 1000) * 2]
    assert [label for label, _ in collectives.gathered] == ["adrun/same_step", f"{plans[0].name}/indices", f"{plans[0].name}/values"]
    sent = sum(n for _, n in collectives.reduced) + sum(n for _, n in collectives.gathered)
    assert sent == bound + 16  # the check: the apply's hash and the embedding's row count, int64
