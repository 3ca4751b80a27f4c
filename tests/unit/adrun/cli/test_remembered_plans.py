"""Auto as the default (adrun/cli/planning.py): the plan is remembered in the records per graph,
cluster, network facts, builder options and adrun version, so a second start profiles nothing; a
script too short to time is planned from its facts (and that plan is not remembered); a cluster
without PS processes gets an all-reduce plan; a TF2 script gets Auto too, among what TF2 mode runs, and
its plan is remembered under its own key (its fingerprint holds the kind). The slow parts (capture,
profile, network measurement) are replaced by recorders; the records database is real."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from adrun.cli.planning import chosen_plan, plan_script
from adrun.gathering import FactSources
from adrun.graph_item import GraphItem
from adrun.records.store import SCHEMA_VERSION, cluster_key, open_records, plan_key
from adrun.spec import ClusterSpec, Node
from adrun.strategies.document import AllReduceSync, PSSync, tf2_refusals
from tests.support.cost_facts import hosts_spec, network, var
from tests.support.slow_parts import FakeRemote, SlowParts

GRAPH = GraphItem(batch_size=8, variables=[var("emb", [100_000, 16], "sparse"), var("w", [16, 4])])
MEASURED = network(hosts_spec(2), 1e8, 1e-4)


@pytest.fixture
def calls(monkeypatch) -> SlowParts:
    """What planning asked of the slow parts, and the status lines it printed."""
    return SlowParts(GRAPH, {"emb": 50}, MEASURED).install(monkeypatch)


def plan(records, spec: ClusterSpec | None = None, options: dict[str, str] | None = None):
    return plan_script(chosen_plan(None, options or {}),
                       FactSources(Path("train.py"), [], spec or hosts_spec(2), "job", FakeRemote(connected=True), records))


def test_a_default_start_profiles_once_and_the_next_start_reuses_the_remembered_plan(calls, tmp_path):
    with open_records(tmp_path / "records.sqlite") as records:
        _, first = plan(records)
        assert (len(calls.starts), len(calls.captures), len(calls.profiles), len(calls.measures)) == (1, 1, 1, 1)
        assert first.builder == "Auto"
        # Auto's predicted step beside the next two builders'
        assert first.reason.startswith("predicted step ") and first.reason.count(" ms") == 3
        key = plan_key(GRAPH.fingerprint, cluster_key(hosts_spec(2)), MEASURED, "Auto",
                       {"allow_lossy": False, "allow_staleness": False})
        assert records.plan_for(key) == first

        calls.status.clear()
        _, again = plan(records)
        assert again == first
        # captured only: the second start's one process is told to stop at its capture point
        assert (len(calls.starts), len(calls.captures), len(calls.profiles), len(calls.measures)) == (2, 2, 1, 1)
        assert any("the plan made earlier for this graph on this cluster" in s for s in calls.status)

        _, lossy = plan(records, options={"allow_lossy": "true"})  # other options: planned anew
        assert len(calls.profiles) == 2 and lossy.options["allow_lossy"] is True


def test_a_script_too_short_to_time_is_planned_from_its_facts_and_not_remembered(calls, tmp_path):
    calls.timed = False
    with open_records(tmp_path / "records.sqlite") as records:
        _, first = plan(records)
        assert first.builder == "Auto"
        assert "no step was timed: planned from the model's facts and the network alone" in first.reason
        assert ("train.py: ran 1 training step(s), all of them warm-up (1), so no step was timed: planning from "
                "the model's facts and the network alone") in calls.status
        assert records.profile_for(GRAPH.fingerprint, 8) is None  # an untimed profile is no measurement
        plan(records)
    assert len(calls.profiles) == 2  # not remembered: a longer run is profiled


ONE_HOST = ClusterSpec(version=1, nodes=[Node(address="localhost", chief=True, workers=2, ps=0)])


@pytest.mark.parametrize("spec,timed", [(hosts_spec(2, ps=0), True), (ONE_HOST, False)])
def test_a_cluster_without_ps_processes_gets_an_all_reduce_plan(calls, tmp_path, spec, timed):
    calls.timed = timed  # untimed on one host: compute 0 and loopback, the step is still a number
    with open_records(tmp_path / "records.sqlite") as records:
        _, made = plan(records, spec)
    assert made.reason.startswith("predicted step ") and "nan" not in made.reason
    assert made.builder == "Auto" and made.num_ps == 0
    syncs = [s for v in made.variables for s in v.synchronizers()]
    assert syncs and all(isinstance(s, AllReduceSync) for s in syncs)
    assert not any(isinstance(s, PSSync) for s in syncs)


def test_a_tf2_script_is_planned_by_auto_among_what_tf2_runs_and_remembered_apart(calls, tmp_path):
    with open_records(tmp_path / "records.sqlite") as records:
        _, graph_plan = plan(records, hosts_spec(2, ps=1))
        calls.graph = GRAPH.model_copy(update={"kind": "tf2"})
        _, made = plan(records, hosts_spec(2, ps=1))
        assert len(calls.profiles) == 2  # another kind is another graph: not the graph script's plan
        assert made.builder == "Auto" and made.kind == "tf2" and made.reason.startswith("predicted step ")
        syncs = [s for v in made.variables for s in v.synchronizers()]
        assert syncs and not tf2_refusals(made.variables)
        assert graph_plan.kind == "graph"
        _, again = plan(records, hosts_spec(2, ps=1))
        assert again == made and len(calls.profiles) == 2  # remembered


def test_records_of_schema_version_1_gain_the_plans_table(tmp_path):
    path = tmp_path / "records.sqlite"
    open_records(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE plans")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    db.close()
    with open_records(path) as records:
        assert records.plan_for("absent") is None
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == (str(SCHEMA_VERSION),)
    db.close()
