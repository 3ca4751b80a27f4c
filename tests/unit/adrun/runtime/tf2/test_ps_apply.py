"""The PS synchronizer setting a TF2 parameter-server worker runs with (adrun/runtime/tf2/ps_apply.py)."""

from __future__ import annotations

import pytest

from adrun.runtime.tf2.ps_apply import ps_mode
from adrun.strategies.document import AllReduceSync, Partition, PSSync, Strategy, VariablePlan


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
