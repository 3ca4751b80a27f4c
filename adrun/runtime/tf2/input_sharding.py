"""TF2 mode's `--shard-data`: each worker trains on its own disjoint part of what the script gives
Keras 3 `fit`, and every worker runs the same number of steps per epoch.

The split is graph mode's (adrun/runtime/kernels/input_sharding.py, tf.data's auto-shard by
element): worker i of N takes elements i, i+N, i+2N, ... That is rows for arrays and tensors (x, y
and sample_weight alike, so they stay aligned; `class_weight` is a mapping and stays as it is) and
whole batches for a batched `tf.data.Dataset`.

Equal step counts matter more here than in graph mode: each step all-reduces, so a worker with
one step more would wait for peers that have left. So the remainder is dropped first: the last
n mod N rows of an array input (each worker then has floor(n/N) rows, hence the same number of
batches), and the last C mod N batches of a dataset whose number of batches C is known. At most
N-1 rows or batches per epoch go unused, which the chief says once on stderr. A dataset whose
length tf.data cannot tell (a `filter`, a file reader) is sharded by tf.data's auto-shard, by file
where it reads files, as in graph mode; its shards may differ in length, which a warning says once,
and then `steps_per_epoch` (the same on every worker, and no more than the shortest shard's
batches) keeps the step counts equal. An infinite
dataset (`repeat()`) needs `steps_per_epoch` anyway, so its workers run the same count.

Only `fit`'s training input is split. `validation_data` and a `validation_split` part (split from
the whole input before sharding, as in a plain run) stay whole on every worker, so each worker's
validation metrics are those of a plain run; `evaluate` and `predict` are per worker as in a plain
run. Python generators and `PyDataset`s are read whole by every worker (a warning says so).
"""

from __future__ import annotations

import functools
import sys
import threading

from adrun.runtime.context import TaskContext

_fit = threading.local()  # .pending: the next data adapter made on this thread is fit's training input
_warned: set[str] = set()


def shard_arrays(arrays, num_workers: int, index: int):  # type: ignore[no-untyped-def]
    """`arrays` (a structure of arrays or tensors with one first dimension, None allowed) cut to
    a multiple of `num_workers` rows, then rows `index::num_workers` of each."""
    from keras.src import tree
    from keras.src.trainers.data_adapters import array_slicing

    kept = _row_count(arrays) // num_workers * num_workers
    sliceables = array_slicing.convert_to_sliceable(arrays)
    return tree.map_structure(
        lambda a: None if a is None else a[slice(index, kept, num_workers)], sliceables)


def _row_count(arrays) -> int:  # type: ignore[no-untyped-def]
    from keras.src import tree

    return next(int(a.shape[0]) for a in tree.flatten(arrays) if a is not None)


def shard_dataset(dataset, num_workers: int, index: int):  # type: ignore[no-untyped-def]
    """Batches `index::num_workers` of `dataset` after dropping the last (C mod N) when its batch
    count C is known; tf.data's auto-shard (graph mode's split) when it is not."""
    import tensorflow as tf

    count = int(dataset.cardinality())
    if count == tf.data.INFINITE_CARDINALITY:
        return dataset.shard(num_workers, index)
    if count >= 0:
        return dataset.take(count - count % num_workers).shard(num_workers, index)
    _warn_once("unknown-length",
               "--shard-data: fit's tf.data input has a length tf.data cannot tell, so its shards "
               "may differ in length; pass steps_per_epoch to fit so every worker runs the same "
               "number of steps")
    from adrun.runtime.kernels.input_sharding import shard_for_worker

    return shard_for_worker(dataset, num_workers, index)


def _say_left_out(ctx: TaskContext, total: int, unit: str) -> None:
    """Tell the user once (from the chief: every worker drops the same) what the split leaves out."""
    left, n = total % ctx.num_workers, ctx.num_workers
    if left and ctx.is_chief:
        _warn_once(f"left-out-{unit}", f"--shard-data: fit's input has {total} {unit}; each of the {n} workers "
                   f"trains on {total // n} of them per epoch, and the last {left} are left out so that every "
                   f"worker runs the same number of steps")


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"adrun: {message}", file=sys.stderr, flush=True)


def _install(ctx: TaskContext) -> None:
    """Mark each `fit` call, and shard the input of the first data adapter it makes: fit's own
    training iterator, made before any validation iterator."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
    from keras.src.trainers import data_adapters
    from keras.src.trainers.data_adapters import array_data_adapter

    original_fit = TensorFlowTrainer.fit

    @functools.wraps(original_fit)
    def fit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        outer = getattr(_fit, "pending", False)
        _fit.pending = True
        try:
            return original_fit(self, *args, **kwargs)
        finally:
            _fit.pending = outer

    original_adapter = data_adapters.get_data_adapter

    @functools.wraps(original_adapter)
    def get_data_adapter(x, y=None, sample_weight=None, *args, **kwargs):  # type: ignore[no-untyped-def]
        if getattr(_fit, "pending", False):
            _fit.pending = False
            n, i = ctx.num_workers, ctx.task_index
            if array_data_adapter.can_convert_arrays((x, y, sample_weight)):
                _say_left_out(ctx, _row_count((x, y, sample_weight)), "rows")
                x, y, sample_weight = shard_arrays((x, y, sample_weight), n, i)
            elif data_adapters.is_tf_dataset(x):
                _say_left_out(ctx, max(0, int(x.cardinality())), "batches")
                x = shard_dataset(x, n, i)
            elif not isinstance(x, data_adapters.data_adapter.DataAdapter):
                _warn_once("unsharded", f"--shard-data: fit's input is a {type(x).__name__}; adrun shards "
                           "arrays, tensors and tf.data datasets only, so every worker reads all of it")
        return original_adapter(x, y, sample_weight, *args, **kwargs)

    TensorFlowTrainer.fit = fit
    data_adapters.get_data_adapter = get_data_adapter


def install(ctx: TaskContext) -> None:
    """Installer for `keras.src.backend.tensorflow.trainer`; inert unless the job shards data and
    has more than one worker."""
    if ctx.role == "worker" and ctx.settings.shard_data and ctx.num_workers > 1:
        _install(ctx)


PATCHES = {"keras.src.backend.tensorflow.trainer": install}
