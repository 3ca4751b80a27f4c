"""The splits of TF2 mode's --shard-data (adrun/runtime/tf2/input_sharding.py), in process: rows
i::N of arrays cut to a multiple of N (structures and tensors alike), batches i::N of a dataset of
known length cut likewise, of an infinite one as they come; auto-shard with a warning otherwise."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from adrun.runtime.tf2 import input_sharding  # noqa: E402


def _rows(dataset) -> list[list[int]]:
    return [batch.numpy().ravel().tolist() for batch in dataset]


@pytest.mark.parametrize("num_workers", [2, 3, 4])
def test_array_shards_are_disjoint_equal_and_leave_out_at_most_n_minus_1_rows(num_workers):
    x = {"a": np.arange(11), "b": tf.constant(np.arange(11) * 10)}
    shards = [input_sharding.shard_arrays((x, np.arange(11), None), num_workers, i) for i in range(num_workers)]
    kept = 11 - 11 % num_workers
    for i, (xs, y, weights) in enumerate(shards):
        assert np.asarray(xs["a"]).tolist() == list(range(i, kept, num_workers))
        assert np.asarray(xs["b"]).tolist() == [10 * r for r in range(i, kept, num_workers)]
        assert np.asarray(y).tolist() == list(range(i, kept, num_workers))
        assert weights is None
    assert {len(np.asarray(y)) for _, y, _ in shards} == {11 // num_workers}


def test_a_dataset_of_known_length_loses_its_last_batches_to_a_multiple_of_n():
    dataset = tf.data.Dataset.range(11).batch(2)  # 6 batches
    assert [_rows(input_sharding.shard_dataset(dataset, 4, i)) for i in range(4)] == [
        [[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]]


def test_an_infinite_dataset_is_split_by_batch_as_it_comes():
    dataset = tf.data.Dataset.range(4).batch(2).repeat()
    assert _rows(input_sharding.shard_dataset(dataset, 2, 1).take(3)) == [[2, 3], [2, 3], [2, 3]]


def test_a_dataset_of_unknown_length_is_auto_sharded_and_the_user_told_once(capsys):
    dataset = tf.data.Dataset.range(10).filter(lambda r: r >= 0).batch(2)
    assert int(dataset.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert _rows(input_sharding.shard_dataset(dataset, 2, 1)) == [[2, 3], [6, 7]]
    input_sharding.shard_dataset(dataset, 2, 0)
    assert capsys.readouterr().err.count("pass steps_per_epoch to fit") == 1


def test_fit_is_left_alone_without_shard_data_or_with_one_worker():
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    from adrun.env_vars import Settings
    from adrun.runtime.context import TaskContext

    def context(num_workers: int, shard: bool) -> TaskContext:
        return TaskContext(mode="run", role="worker", task_index=0, num_workers=num_workers, job_id="j",
                           cluster={}, strategy_file=None, capture_out=None, settings=Settings(shard_data=shard))

    fit = TensorFlowTrainer.fit
    input_sharding.install(context(2, shard=False))
    input_sharding.install(context(1, shard=True))
    assert TensorFlowTrainer.fit is fit
