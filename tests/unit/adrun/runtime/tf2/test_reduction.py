"""What a TF2 worker's sparse all-gather sends (adrun/runtime/tf2/reduction.py): its rows summed per
index for an optimizer that takes only the sums, every row otherwise; the mean is the same. Its row
count rides with the apply's check, as one more number of that small gather."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from adrun.runtime.tf2.duplicate_rows import summed_per_index
from adrun.runtime.tf2.reduction import TF2Collectives, mean_gradients
from adrun.strategies.document import AllReduceSync, VariablePlan

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
