"""A TF2 script's GraphItem and plan: the kind is recorded and fingerprinted, and what TF2 mode cannot
run is refused when planned, naming the variable."""

from __future__ import annotations

import pytest
import yaml

from adrun.errors import UserError
from adrun.graph_item import GraphItem, VariableInfo
from adrun.spec import default_local_spec
from adrun.strategies import build_strategy
from adrun.strategies.document import load_strategy, strategy_to_yaml

VARIABLES = [VariableInfo(name="model/dense/kernel", shape=[8, 16], dtype="float32", trainable=True, grad="dense"),
             VariableInfo(name="model/embedding", shape=[50, 4], dtype="float32", trainable=True, grad="sparse")]


def item(kind: str) -> GraphItem:
    return GraphItem(kind=kind, variables=VARIABLES, optimizer="Adam")


def test_kind_enters_the_fingerprint_of_tf2_items_only() -> None:
    legacy = GraphItem(variables=VARIABLES, optimizer="Adam")
    assert item("graph").fingerprint == legacy.fingerprint  # plans made before kinds existed stay valid
    assert item("tf2").fingerprint != legacy.fingerprint
    assert GraphItem.from_json(item("tf2").to_json()).kind == "tf2"


def test_tf2_plan_records_its_kind() -> None:
    plan = build_strategy("AllReduce", item("tf2"), default_local_spec())
    assert plan.kind == "tf2"
    assert yaml.safe_load(strategy_to_yaml(plan))["kind"] == "tf2"
    graph = yaml.safe_load(strategy_to_yaml(build_strategy("AllReduce", item("graph"), default_local_spec())))
    assert "kind" not in graph  # the default, left out: graph plans read as before


@pytest.mark.parametrize("builder", ["PS", "PSLoadBalancing"])
def test_parameter_server_plans_are_planned_for_tf2(builder: str) -> None:
    plan = build_strategy(builder, item("tf2"), default_local_spec())
    assert plan.kind == "tf2" and plan.uses_ps


def test_mixed_plans_are_refused_for_tf2() -> None:
    with pytest.raises(UserError) as refused:
        build_strategy("Parallax", item("tf2"), default_local_spec())
    message = str(refused.value)
    assert "a plan mixing parameter servers ('model/embedding') and all-reduce ('model/dense/kernel')" in message
    assert "Cannot enable remote execution as well as collective ops at the moment" in message


def test_graph_plans_keep_parameter_servers() -> None:
    assert build_strategy("PS", item("graph"), default_local_spec()).uses_ps


def test_in_graph_replicas_are_refused_for_tf2(tmp_path) -> None:
    plan = build_strategy("AllReduce", item("tf2"), default_local_spec()).model_dump(mode="json")
    plan["replica_devices"] = [["CPU:0", "CPU:1"]] * plan["num_workers"]
    path = tmp_path / "plan.yml"
    path.write_text(yaml.safe_dump(plan))
    with pytest.raises(UserError, match=r"replica_devices\[0\]: 2 in-graph replicas: a TF2 script runs one replica"):
        load_strategy(path)
