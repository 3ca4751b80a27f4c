"""`--shard-data`: every worker reads its own disjoint part of the script's tf.data input.

When the script turns a dataset into an iterator, the dataset is wrapped in tf.data's own
auto-shard rewrite for (number of workers, this worker's index): file-based pipelines are split by
file, others by element (with batching, whole batches), so no example is read by two workers.
"""

from __future__ import annotations

import warnings

from tensorflow.python.data.experimental.ops import distribute
from tensorflow.python.data.ops import dataset_ops


def shard_for_worker(dataset: dataset_ops.DatasetV2, num_workers: int, index: int) -> dataset_ops.DatasetV1Adapter:
    with warnings.catch_warnings():
        # tf.data warns that options are not known at graph construction time; they are not needed here
        warnings.simplefilter("ignore", UserWarning)
        sharded = distribute._AutoShardDataset(dataset, num_workers, index)
    return dataset_ops.DatasetV1Adapter(sharded)
