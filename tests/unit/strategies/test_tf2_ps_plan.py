"""What TF2 mode runs of parameter-server plans (strategies/document.py tf2_refusals, THE predicate)
and where the runtime puts each variable (adrun/runtime/tf2/ps_variables.py)."""

from __future__ import annotations

import pytest

from adrun.graph_item import GraphItem, VariableInfo
from adrun.spec import default_local_spec
from adrun.strategies import build_strategy
from adrun.strategies.document import AllReduceSync, Partition, PSSync, VariablePlan, tf2_refusals

DENSE = VariableInfo(name="model/dense/kernel", shape=[8, 16], dtype="float32", trainable=True, grad="dense")
EMBED = VariableInfo(name="model/embedding", shape=[5000, 64], dtype="float32", trainable=True, grad="sparse")


def plan(name: str, sync: PSSync | AllReduceSync | None = None, partition: Partition | None = None) -> VariablePlan:
    return VariablePlan(name=name, shape=[8, 16], dtype="float32", grad="dense", sync=sync, partition=partition)


def test_every_variable_on_ps_runs() -> None:
    assert tf2_refusals([plan("a", PSSync(ps_task=0)), plan("b", PSSync(ps_task=1))]) == []
    assert tf2_refusals([plan("a", PSSync(ps_task=0, sync=False)), plan("b", PSSync(ps_task=0, sync=False))]) == []


def test_every_variable_all_reduced_runs() -> None:
    assert tf2_refusals([plan("a", AllReduceSync(group=0, compressor="fp16")),
                         plan("b", partition=Partition(axis=0, shards=[AllReduceSync(group=0)] * 2))]) == []


def test_mixed_plan_is_refused_once_with_tf_reason() -> None:
    [(loc, why)] = tf2_refusals([plan("a", PSSync(ps_task=0)), plan("b", AllReduceSync(group=0)),
                                 plan("c", AllReduceSync(group=0))])
    assert loc == ()
    assert why.startswith("a plan mixing parameter servers ('a') and all-reduce ('b')")
    assert "Cannot enable remote execution as well as collective ops at the moment" in why


def test_partitioned_ps_variable_runs_on_axis_0_only() -> None:
    rows = Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)])
    columns = Partition(axis=1, shards=[PSSync(ps_task=0), PSSync(ps_task=1)])
    assert tf2_refusals([plan("a", PSSync(ps_task=0)), plan("e", partition=rows)]) == []
    found = tf2_refusals([plan("a", PSSync(ps_task=0)), plan("e", partition=columns)])
    assert [loc for loc, _ in found] == [("variables", 1, "partition", "shards", 0, "kind"),
                                         ("variables", 1, "partition", "shards", 1, "kind")]
    assert all("'e': a variable split over PS tasks on an axis other than 0 is not built in TF2 mode" in why
               for _, why in found)


def test_local_proxy_and_differing_sync_settings_are_refused() -> None:
    found = tf2_refusals([plan("a", PSSync(ps_task=0, local_proxy=True)), plan("b", PSSync(ps_task=0, staleness=2))])
    assert [loc for loc, _ in found] == [("variables", 0, "sync", "local_proxy"), ()]
    assert "local_proxy is not built in TF2 mode" in found[0][1]
    assert "differ in sync/staleness (sync: true, staleness: 0, sync: true, staleness: 2)" in found[1][1]


def test_partitioned_ps_builder_splits_for_tf2() -> None:
    from adrun.runtime.tf2.ps_variables import ps_tasks_by_name

    spec = default_local_spec().model_copy(deep=True)
    spec.nodes[0].ps = 2
    item = GraphItem(kind="tf2", variables=[DENSE, EMBED], optimizer="Adam")
    tasks = ps_tasks_by_name(build_strategy("PartitionedPS", item, spec))
    assert sorted(tasks["model/embedding"]) == [0, 1] and sorted(tasks["model/dense/kernel"]) == [0, 1]


def test_tf_keras_script_is_never_planned_a_split_ps_variable() -> None:
    """tf_keras (GraphItem.keras) lists a split variable's shards as its weights: a split on PS tasks
    is refused at the variable's partition, whole PS variables and all-reduce splits are not; a
    Keras 3 or unknown flavour splits as before."""
    rows = Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)])
    split = [plan("a", PSSync(ps_task=0)), plan("e", partition=rows), *[plan(f"s{i}", partition=rows) for i in range(3)]]
    found = tf2_refusals(split, keras="tf_keras")
    assert [loc for loc, _ in found] == [("variables", 1, "partition")]  # one finding, at the first split
    assert found[0][1].startswith("'e', 's0', 's1' and 1 more split over PS tasks: TF2 mode splits a variable "
                                  "over PS tasks for Keras 3 only, and the script trains with tf_keras")
    assert tf2_refusals(split, keras="keras3") == [] and tf2_refusals(split) == []
    assert tf2_refusals([plan("a", PSSync(ps_task=0)), plan("b", PSSync(ps_task=1))], keras="tf_keras") == []
    assert tf2_refusals([plan("b", partition=Partition(axis=0, shards=[AllReduceSync(group=0)] * 2))],
                        keras="tf_keras") == []


def test_tf_keras_flavour_reaches_the_plan_and_the_fingerprint() -> None:
    """PartitionedPS of a tf_keras item is refused by the document; PSLoadBalancing plans it, its
    document saying tf_keras; the flavour changes a tf_keras item's fingerprint, not a Keras 3 one's."""
    from adrun.errors import UserError

    spec = default_local_spec().model_copy(deep=True)
    spec.nodes[0].ps = 2
    keras2 = GraphItem(kind="tf2", keras="tf_keras", variables=[DENSE, EMBED], optimizer="Adam")
    with pytest.raises(UserError, match="variables\\[0\\].partition: 'model/dense/kernel', 'model/embedding' split over PS tasks: TF2 mode "
                                        "splits a variable over PS tasks for Keras 3 only"):
        build_strategy("PartitionedPS", keras2, spec)
    assert build_strategy("PSLoadBalancing", keras2, spec).keras == "tf_keras"
    plain = GraphItem(kind="tf2", variables=[DENSE, EMBED], optimizer="Adam")
    assert keras2.fingerprint != plain.fingerprint
    assert plain.model_copy(update={"keras": "keras3"}).fingerprint == plain.fingerprint


def test_refusal_is_a_problem_of_the_document() -> None:
    from pydantic import ValidationError

    from adrun.strategies.document import Strategy

    with pytest.raises(ValidationError, match=r"a plan mixing parameter servers \('a'\) and all-reduce \('b'\)"):
        Strategy(version=1, kind="tf2", builder="hand", fingerprint="f", num_workers=2, num_ps=1,
                 variables=[plan("a", PSSync(ps_task=0)), plan("b", AllReduceSync(group=0))])


def test_placement_plan_then_slot_scope_then_ps0() -> None:
    from adrun.runtime.tf2.ps_variables import ps_task_of

    tasks = {"model/dense/kernel": [1], "model/embedding": [1, 0]}
    assert ps_task_of("model/dense/kernel", "", tasks) == [1]
    assert ps_task_of("model/embedding", "", tasks) == [1, 0]
    assert ps_task_of("adam/model_dense_kernel_momentum", "/job:ps/replica:0/task:1/device:CPU:0", tasks) == [1]
    assert ps_task_of("adam/iteration", "", tasks) == [0]
    assert ps_task_of("adam/iteration", "/job:worker/replica:0/task:1/device:CPU:0", tasks) == [0]


def test_every_planned_variable_has_its_ps_task() -> None:
    from adrun.runtime.tf2.ps_variables import ps_tasks_by_name

    spec = default_local_spec().model_copy(deep=True)
    spec.nodes[0].ps = 2
    item = GraphItem(kind="tf2", variables=[DENSE, EMBED], optimizer="Adam")
    plan = build_strategy("PSLoadBalancing", item, spec)
    assert ps_tasks_by_name(plan) == {"model/embedding": [0], "model/dense/kernel": [1]}  # largest first
