"""Auto for TF2 scripts (strategies/auto.py): the plans it starts from and the choices it offers a
variable are those `document.tf2_refusals` lets through, whatever that predicate says (the tests
swap it), a rule about whole plans is met by searching within one kind of synchronizer, and a
script too short to time is still planned. Synthetic facts, no TensorFlow."""

from __future__ import annotations

import pytest

from adrun.errors import UserError
from adrun.graph_item import GraphItem
from adrun.strategies import BUILDERS, build_strategy, document
from adrun.strategies.auto import Auto, AutoOptions, _search, builtin_plans
from adrun.strategies.cost_model import predict
from adrun.strategies.document import AllReduceSync, PSSync, Strategy
from adrun.strategies.facts import ModelProfile
from adrun.strategies.fit import fit
from adrun.strategies.planning_facts import PlanningFacts
from tests.support.cost_facts import hosts_spec, network, profile, var

SLOW = 12.5e6  # 100 Mbit/s
MIXED = GraphItem(batch_size=256, variables=[
    var("user", [1_000_000, 64], "sparse"), var("item", [200_000, 64], "sparse"),
    var("mlp1/kernel", [192, 1024]), var("mlp1/bias", [1024]), var("mlp2/kernel", [1024, 1024]),
    var("mlp2/bias", [1024]), var("out/kernel", [1024, 1]), var("out/bias", [1]),
])
ROWS = {"user": 4000, "item": 3000}
DENSE = GraphItem(batch_size=32, variables=[var(f"l{i}/kernel", [1024, 1024]) for i in range(6)])
# a PS on every host: graph mode's best plan then mixes (the embeddings' rows all-to-all, the MLP in
# a ring; with PSs on two hosts the rows' reads converge on the workers and the ring wins)
SPEC = hosts_spec(4)


def tf2(graph: GraphItem) -> GraphItem:
    return graph.model_copy(update={"kind": "tf2"})


def facts(graph: GraphItem, rows: dict[str, float] | None = None, prof: ModelProfile | None = None) -> PlanningFacts:
    return PlanningFacts(spec=SPEC, graph=graph, profile=prof or profile(graph, 0.02, rows or {}),
                         network=network(SPEC, SLOW, latency_s=1e-4), fit=fit([]))


def kinds(plan: Strategy) -> set[str]:
    return {s.kind for v in plan.variables for s in v.synchronizers()}


def runs_in_tf2(plan: Strategy) -> bool:
    return not document.tf2_refusals(plan.variables, plan.replica_devices)


def tf2_builders(graph: GraphItem) -> set[str]:
    """The built-in builders whose plan of `graph` on SPEC the document accepts."""
    found = set()
    for name in BUILDERS:
        try:
            build_strategy(name, graph, SPEC)
        except UserError:
            continue
        found.add(name)
    return found


def test_a_tf2_script_is_planned_among_what_tf2_runs():
    assert kinds(Auto().build(facts(MIXED, ROWS))) == {"ps", "allreduce"}  # graph mode mixes here
    ranked = Auto().rank(facts(tf2(MIXED), ROWS))
    assert {plan.builder for plan, _ in ranked} == tf2_builders(tf2(MIXED)) | {"Auto"}
    assert all(plan.kind == "tf2" and runs_in_tf2(plan) for plan, _ in ranked)
    auto, prediction = next((plan, p) for plan, p in ranked if plan.builder == "Auto")
    assert prediction.step_s <= min(p.step_s for plan, p in ranked if plan.builder != "Auto")


def syncs(variables):
    return [s for v in variables for s in v.synchronizers()]


def refuse_all_reduce(variables, replica_devices=None, keras=None):
    return [((), "not in this test's TF2")] if any(isinstance(s, AllReduceSync) for s in syncs(variables)) else []


real_refusals = document.tf2_refusals


def test_what_tf2_runs_is_read_from_tf2_refusals(monkeypatch):
    """Swap the predicate (PS runs, all-reduce does not): Auto follows it, with no list of its own."""
    monkeypatch.setattr(document, "tf2_refusals", refuse_all_reduce)
    plan = Auto().build(facts(tf2(MIXED), ROWS))
    assert plan.kind == "tf2" and kinds(plan) == {"ps"}
    assert {p.builder for p in builtin_plans(facts(tf2(MIXED), ROWS))} == tf2_builders(tf2(MIXED))
    assert "AllReduce" not in tf2_builders(tf2(MIXED)) and "PS" in tf2_builders(tf2(MIXED))


def split_on_ps(plan: Strategy) -> set[str]:
    return {v.name for v in plan.variables if v.partition is not None and kinds_of(v) == {"ps"}}


def kinds_of(variable) -> set[str]:
    return {s.kind for s in variable.synchronizers()}


def test_a_tf_keras_script_is_never_planned_a_split_ps_variable(monkeypatch):
    """With PS plans the only ones (all-reduce refused), Auto splits the large tables of a Keras 3
    script over the PSs, and of a tf_keras script (GraphItem.keras) keeps every variable whole."""
    monkeypatch.setattr(document, "tf2_refusals", lambda variables, replica_devices=None, keras=None: [
        *refuse_all_reduce(variables), *real_refusals(variables, replica_devices, keras)])
    assert split_on_ps(Auto().build(facts(tf2(MIXED), ROWS)))
    plan = Auto().build(facts(tf2(MIXED).model_copy(update={"keras": "tf_keras"}), ROWS))
    assert plan.keras == "tf_keras" and kinds(plan) == {"ps"} and split_on_ps(plan) == set()


def test_compressors_are_offered_only_when_tf2_runs_them(monkeypatch):
    lossy = Auto(AutoOptions(allow_lossy=True))
    assert {s.compressor for v in lossy.build(facts(tf2(DENSE))).variables for s in v.synchronizers()} - {"none"}
    monkeypatch.setattr(document, "tf2_refusals", lambda variables, replica_devices=None, keras=None: [((), "no")] if any(
        getattr(s, "compressor", "none") != "none" or isinstance(s, PSSync) for s in syncs(variables)) else [])
    plan = lossy.build(facts(tf2(DENSE)))
    assert {s.compressor for v in plan.variables for s in v.synchronizers()} == {"none"}


def test_a_refused_whole_plan_is_searched_again_within_one_kind():
    """A whole-plan rule (here: no plan mixing PS and all-reduce) that the per-synchronizer
    predicate cannot express: the descent's mixed end point is refused, and the search keeps to
    the kinds each start uses."""
    planning = facts(MIXED, ROWS)
    plans = builtin_plans(planning)
    assert planning.profile is not None and planning.network is not None and planning.fit is not None
    c = planning.fit.coefficients
    predictions = [predict(p, planning.profile, SPEC, planning.network, c) for p in plans]

    def search(runnable):
        return _search(MIXED, SPEC, planning.profile, planning.network, c, AutoOptions(), predictions, plans,
                       runnable=runnable)

    assert {s.kind for v in search(lambda variables: True) for s in v.synchronizers()} == {"ps", "allreduce"}
    one_kind = search(lambda variables: len({s.kind for v in variables for s in v.synchronizers()}) == 1)
    assert len({s.kind for v in one_kind for s in v.synchronizers()}) == 1
    best_start = min(p.step_s for p in predictions)
    found = predict(Auto().document(planning, one_kind), planning.profile, SPEC, planning.network, c).step_s
    assert found <= best_start * (1 + 1e-9)  # never worse than the best start it may keep


def test_a_tf2_script_too_short_to_time_is_planned_from_its_facts():
    graph = tf2(MIXED)
    plan = Auto().build(facts(graph, prof=ModelProfile.of_facts(graph)))
    assert plan.kind == "tf2" and runs_in_tf2(plan)
    assert "no step was timed" in plan.reason


@pytest.mark.parametrize("graph", [MIXED, DENSE])
def test_a_tf2_plan_is_accepted_by_the_document(graph):
    plan = Auto().build(facts(tf2(graph), ROWS if graph is MIXED else {}))
    assert Strategy.model_validate(plan.model_dump()) == plan
