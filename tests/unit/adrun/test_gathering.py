"""Gathering the facts a plan is built from (adrun/gathering.py), with the slow parts (capture,
profiling run, network measurement) replaced by recorders: what is gathered for which needs, what
the records give and keep, and what the terminal is told."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun import gathering
from adrun.graph_item import GraphItem
from adrun.records.store import cluster_key, open_records
from adrun.spec import ClusterSpec, NetworkSpec
from adrun.strategies.auto import Auto
from adrun.strategies.cost_model import Coefficients
from adrun.strategies.fit import FitResult
from adrun.strategies.planning_facts import Fact
from tests.support.cost_facts import hosts_spec, network, var
from tests.support.slow_parts import FakeRemote, SlowParts

SPEC = hosts_spec(2)
GRAPH = GraphItem(batch_size=8, variables=[var("emb", [1000, 8], "sparse"), var("w", [8, 4])])
STORED, MEASURED = network(SPEC, 1e6), network(SPEC, 2e6)


@pytest.fixture
def calls(monkeypatch) -> SlowParts:
    """What the gathering asked of the slow parts, and the status lines it printed."""
    return SlowParts(GRAPH, {"emb": 5}, MEASURED).install(monkeypatch)


def sources(records, remote=None, measure_network=False):
    return gathering.FactSources(Path("train.py"), ["--steps", "3"], SPEC, "job-1", remote or FakeRemote(), records,
                                 measure_network=measure_network)


def test_a_builder_of_the_graph_alone_gets_the_capture_and_nothing_else(calls, tmp_path):
    with open_records(tmp_path / "records.sqlite") as records:
        facts = gathering.gather_facts(frozenset(), sources(records))
        assert records.network_for(cluster_key(SPEC)) is None and records.profile_for(GRAPH.fingerprint, 8) is None
    assert (facts.spec, facts.graph, facts.profile, facts.network, facts.fit) == (SPEC, GRAPH, None, None, None)
    assert calls.captures == [(Path("train.py"), ["--steps", "3"], 2, "job-1")]
    assert calls.profiles == calls.measures == []
    assert calls.status == ["capturing the graph of train.py ..."]


def test_autos_facts_profile_measure_fit_and_are_kept(calls, tmp_path):
    remote = FakeRemote()
    with open_records(tmp_path / "records.sqlite") as records:
        facts = gathering.gather_facts(Auto.needs, sources(records, remote))
        assert records.network_for(cluster_key(SPEC)) == MEASURED
        assert records.profile_for(GRAPH.fingerprint, 8) == facts.profile
    start = (Path("train.py"), ["--steps", "3"], 2, "job-1")
    assert calls.starts == calls.captures == [start]  # one process: the graph, then the profile
    assert calls.profiles == [(*start, gathering.PROFILE_WARMUP)]
    assert facts.graph == GRAPH and facts.profile.graph == GRAPH and facts.network == MEASURED
    assert remote.connects == 1  # the other node was reached to measure the path to it
    assert facts.fit.records_used == 0 and facts.fit.coefficients == Coefficients.analytical()
    assert calls.status == ["capturing the graph of train.py ...", "profiling train.py on one process ...",
                            "measuring the network ...",
                               "cost model: analytical coefficients (no usable records of this cluster)"]
    assert not facts.missing(Auto.needs)


@pytest.mark.parametrize("measure_network", [False, True])
def test_stored_network_facts_are_reused_unless_measuring_is_asked(calls, tmp_path, measure_network):
    with open_records(tmp_path / "records.sqlite") as records:
        records.save_network(cluster_key(SPEC), STORED)
        facts = gathering.gather_facts(frozenset({Fact.NETWORK}), sources(records, measure_network=measure_network))
        assert records.network_for(cluster_key(SPEC)) == facts.network
    assert facts.network == (MEASURED if measure_network else STORED)
    assert len(calls.measures) == measure_network
    assert ("measuring the network ..." in calls.status) == measure_network


def test_without_records_nothing_is_read_or_kept_and_the_network_is_measured(calls):
    facts = gathering.gather_facts(Auto.needs, sources(None))
    assert facts.network == MEASURED and facts.fit.records_used == 0


def test_the_network_the_spec_gives_wins_over_the_records_and_is_not_measured(calls, tmp_path):
    given = ClusterSpec(version=1, nodes=SPEC.nodes, network=NetworkSpec(bandwidth_mbit=100, latency_ms=1))
    remote = FakeRemote()
    with open_records(tmp_path / "records.sqlite") as records:
        records.save_network(cluster_key(given), STORED)
        facts = gathering.gather_facts(frozenset({Fact.NETWORK}), gathering.FactSources(
            Path("t.py"), [], given, "j", remote, records))
    assert facts.network == MEASURED and calls.measures == [given]  # network_facts turns the spec's figures into facts
    assert remote.connects == 0 and "measuring the network ..." not in calls.status


@pytest.mark.parametrize("used,skipped,before,after,line", [
    (0, 0, None, None, "cost model: analytical coefficients (no usable records of this cluster)"),
    (0, 2, None, None, "cost model: analytical coefficients (no usable records of this cluster; "
                       "2 record(s) without a profile or network facts left out)"),
    (5, 0, 0.412, 0.087, "cost model fitted on 5 record(s) of this cluster: mean step-time error 9% "
                         "(analytical 41%)"),
    (3, 1, 0.2, 0.15, "cost model fitted on 3 record(s) of this cluster: mean step-time error 15% "
                      "(analytical 20%); 1 record(s) without a profile or network facts left out"),
])
def test_fit_summary_says_how_many_records_and_the_error(used, skipped, before, after, line) -> None:
    assert gathering.fit_summary(FitResult(Coefficients.analytical(), used, skipped, before, after)) == line
