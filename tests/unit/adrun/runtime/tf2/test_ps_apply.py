"""The PS synchronizer setting a TF2 parameter-server worker runs with, and the sparse gradients it
applies (adrun/runtime/tf2/ps_apply.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from adrun.runtime.tf2.ps_apply import PSApply, ps_mode
from adrun.strategies.document import AllReduceSync, Partition, PSSync, Strategy, VariablePlan, dump_strategy
from adrun.task_context import TaskContext


def strategy(*variables: VariablePlan) -> Strategy:
    return Strategy(version=1, kind="tf2", builder="test", fingerprint="f", num_workers=2, num_ps=2,
                    variables=list(variables))


def split(name: str, *shards: PSSync | AllReduceSync) -> VariablePlan:
    return VariablePlan(name=name, shape=[8, 16], dtype="float32", grad="dense",
                        partition=Partition(axis=0, shards=list(shards)))


def test_every_variable_split_takes_the_first_shard_setting() -> None:
    # PartitionedPS on a small Keras model splits every variable: no whole-variable PSSync at all
    plan = strategy(split("a", PSSync(ps_task=1, staleness=2), PSSync(ps_task=0, staleness=2)),
                    split("b", PSSync(ps_task=0, staleness=2), PSSync(ps_task=1, staleness=2)))
    assert ps_mode(plan) == PSSync(ps_task=1, staleness=2)


def test_whole_variable_before_split_one() -> None:
    plan = strategy(VariablePlan(name="w", shape=[4], dtype="float32", grad="dense", sync=PSSync(ps_task=1, sync=False)),
                    split("a", PSSync(ps_task=0, sync=False), PSSync(ps_task=1, sync=False)))
    assert ps_mode(plan) == PSSync(ps_task=1, sync=False)


def test_no_ps_synchronizer_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no PS variable in its plan"):
        ps_mode(strategy(split("a", AllReduceSync(group=0), AllReduceSync(group=0))))


class Uncounted:
    """steps.py's counters, not counted."""

    def started(self) -> Any:
        return tf.constant(0)

    def done(self, examples: Any) -> None:
        pass


@pytest.mark.parametrize(("optimizer", "rows"), [(lambda: keras.optimizers.SGD(0.1), [[4.0], [2.0]]),
                                                  (lambda: keras.optimizers.Adam(0.1), [[1.0], [2.0], [3.0]])],
                         ids=["SGD: summed per id", "Adam: row for row"])
def test_a_sparse_gradient_is_applied_summed_per_id_when_the_optimizer_takes_only_the_sums(
        tmp_path: Path, optimizer: Any, rows: list[list[float]]) -> None:
    """What ps_apply.py hands the optimizer (here one worker, which applies itself; a synchronous
    step pushes these very gradients): duplicate_rows.py decides, as for the all-reduce path."""
    table = keras.Variable(np.zeros((5, 1), np.float32), name="table")
    plan = strategy(VariablePlan(name=table.path, shape=[5, 1], dtype="float32", grad="sparse", sync=PSSync(ps_task=0)))
    dump_strategy(plan, tmp_path / "plan.yml")
    ctx = TaskContext(mode="run", role="worker", task_index=0, num_workers=1, job_id="j", cluster={},
                      strategy_file=str(tmp_path / "plan.yml"))
    grad = tf.IndexedSlices(tf.constant([[1.0], [2.0], [3.0]]), tf.constant([3, 1, 3]), tf.constant([5, 1]))
    applied: list[Any] = []
    PSApply(ctx, Uncounted()).around(optimizer(), [grad], [table], applied.extend)
    [got] = applied
    assert got.values.numpy().tolist() == rows
    assert got.indices.numpy().tolist() == ([3, 1] if len(rows) == 2 else [3, 1, 3])
