"""The fit of the cost model's coefficients (strategies/fit.py) on synthetic trial records."""

from __future__ import annotations

import pytest

from adrun.graph_item import GraphItem
from adrun.spec import ClusterSpec, Node
from adrun.strategies import BUILDERS, build_strategy
from adrun.strategies.cost_model import Coefficients, predict
from adrun.strategies.facts import TrialRecord
from adrun.strategies.fit import fit
from adrun.strategies.planning_facts import PlanningFacts
from tests.support.cost_facts import network, profile, var

# a cluster where the local path bounds some plans (PS 0 serves three workers on its host) and the
# path between the hosts others (the ring)
SPEC = ClusterSpec(version=1, nodes=[
    Node(address="10.0.0.1", chief=True, workers=3, ps=1),
    Node(address="10.0.0.2", workers=1, ps=1),
])
NETWORK = network(SPEC, 1e8, latency_s=2e-4, local_bytes_per_s=1.5e8, local_latency_s=5e-5)
TRUE = Coefficients(remote_bandwidth_factor=0.6, local_bandwidth_factor=0.8, message_latency_s=2e-3,
                    variable_overhead_s=4e-4, ps_variable_overhead_s=1e-3, ps_task_overhead_s=1.5e-3,
                    compute_factor=1.4)

MODELS = [
    (GraphItem(batch_size=32, variables=[var("fc/kernel", [1024, 512]), var("fc/bias", [512])]), {}),
    (GraphItem(batch_size=128, variables=[var("emb", [100_000, 32], "sparse"), var("out/kernel", [32, 64])]),
     {"emb": 800}),
    # 40 small dense variables share one accumulator per PS task; 10 small sparse ones keep one each
    (GraphItem(batch_size=64, variables=[var(f"v{i}", [16, 16]) for i in range(40)]), {}),
    (GraphItem(batch_size=64, variables=[var(f"e{i}", [1000, 16], "sparse") for i in range(10)]),
     {f"e{i}": 20 for i in range(10)}),
]


def records(coefficients=TRUE, cluster_key="three-hosts"):
    """A trial of every builder on every model, at two compute times, measured as `coefficients` predict."""
    out = []
    for graph, rows in MODELS:
        for compute_s in (0.005, 0.05):
            prof = profile(graph, compute_s, rows)
            for builder in BUILDERS.values():
                strategy = builder().build(PlanningFacts(spec=SPEC, graph=graph))
                step_s = predict(strategy, prof, SPEC, NETWORK, coefficients).step_s
                out.append(TrialRecord(recorded_at="2026-11-22T23:00:00", cluster_key=cluster_key,
                                       workload=f"synthetic {len(graph.variables)}", spec=SPEC, strategy=strategy,
                                       profile=prof, network=NETWORK, steps_per_s=1 / step_s))
    return out


def test_fit_recovers_known_coefficients_and_removes_the_error():
    result = fit(records())
    assert result.records_used == 64 and result.records_skipped == 0
    assert result.error_before > 0.2
    assert result.error_after < 0.01
    # every remote path these builders load carries the ring, in both directions at once: the
    # reverse-traffic share is told from the bandwidth factor in the test below
    for name in set(Coefficients.model_fields) - {"reverse_traffic_share"}:
        assert getattr(result.coefficients, name) == pytest.approx(getattr(TRUE, name), rel=0.05), name


def test_fit_tells_the_reverse_traffic_share_from_the_bandwidth_and_recovers_the_ps_variable_overhead():
    """Two hosts, the PS on the first: a PS plan of whole variables (`chunk_bytes=0`: no chunk
    pulled back while others are pushed) loads the path in one direction at a time (its reads, then
    its pushes), the ring in both at once; 40 variables with their own accumulators make the
    per-PS-variable overhead count. Records made with known values give them back."""
    spec = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, ps=1), Node(address="10.0.0.2")])
    net = network(spec, 1e8, latency_s=2e-4)
    true = Coefficients(remote_bandwidth_factor=0.7, reverse_traffic_share=0.25, ps_variable_overhead_s=1e-3)
    result = fit(_records_made_with(true, spec, net, (0.002, 0.005, 0.01, 0.02, 0.05, 0.1), ("PS", "AllReduce"),
                                    {"PS": {"chunk_bytes": "0"}}))
    assert result.error_after < 0.01 < result.error_before
    assert result.coefficients.remote_bandwidth_factor == pytest.approx(0.7, rel=0.02)
    assert result.coefficients.ps_variable_overhead_s == pytest.approx(1e-3, rel=0.02)
    # from its prior (0.1) most of the way to 0.25: the prior still pulls a little at 36 records
    assert result.coefficients.reverse_traffic_share == pytest.approx(0.25, rel=0.1)


def test_fit_tells_the_per_ps_task_overhead_from_the_per_ps_variable_one():
    """Four hosts of one worker and one PS: the PS builder puts every variable on one PS task,
    PSLoadBalancing spreads the same pieces over four; 40 variables with their own accumulators make
    the overheads count.
    Records made with known values of both overheads give both back."""
    spec = ClusterSpec(version=1, nodes=[Node(address=f"10.0.0.{i + 1}", chief=i == 0, ps=1) for i in range(4)])
    net = network(spec, 1e8, latency_s=2e-4)
    true = Coefficients(ps_task_overhead_s=2e-3, ps_variable_overhead_s=5e-4)
    result = fit(_records_made_with(true, spec, net, (0.005, 0.02, 0.05),
                                    ("PS", "PSLoadBalancing", "PartitionedPS", "AllReduce", "Parallax")))
    assert result.error_after < 0.01 < result.error_before
    assert result.coefficients.ps_task_overhead_s == pytest.approx(2e-3, rel=0.05)
    assert result.coefficients.ps_variable_overhead_s == pytest.approx(5e-4, rel=0.05)


def test_records_that_match_the_prior_leave_it_alone():
    result = fit(records(Coefficients.analytical()))
    assert result.error_before == pytest.approx(0.0, abs=1e-12)
    assert result.coefficients.model_dump() == pytest.approx(Coefficients.analytical().model_dump(), rel=1e-12)


def test_with_one_record_the_prior_holds_the_coefficients():
    """One record 3x slower than predicted: the fit moves towards it, not all the way, and no
    coefficient runs off."""
    one = records()[0].model_copy(update={"steps_per_s": records(Coefficients.analytical())[0].steps_per_s / 3})
    result = fit([one])
    assert result.records_used == 1
    assert result.error_after < result.error_before
    assert result.error_after > 0.01
    for name in ("remote_bandwidth_factor", "local_bandwidth_factor", "compute_factor"):
        assert 1 / 8 < getattr(result.coefficients, name) < 8


def test_records_that_cannot_be_predicted_are_skipped_and_counted():
    """No profile, no network facts, or network facts of other hosts."""
    usable = records()
    elsewhere = network(ClusterSpec(version=1, nodes=[Node(address="10.9.0.1", chief=True), Node(address="10.9.0.2")]),
                        1e8)  # measured between other hosts
    bad = [usable[0].model_copy(update={"profile": None}), usable[1].model_copy(update={"network": None}),
           usable[2].model_copy(update={"network": elsewhere})]
    result = fit(bad + usable)
    assert (result.records_used, result.records_skipped) == (len(usable), 3)
    nothing = fit(bad)
    assert (nothing.records_used, nothing.records_skipped) == (0, 3)
    assert nothing.coefficients == Coefficients.analytical()
    assert nothing.error_before is None and nothing.error_after is None


def test_one_cluster_at_a_time():
    mixed = records() + records(cluster_key="other")[:3]
    with pytest.raises(ValueError, match="records of 2 clusters"):
        fit(mixed)
    assert fit(mixed, cluster_key="other").records_used == 3


def _records_made_with(true: Coefficients, spec: ClusterSpec, net, compute_times, builders,
                       options: dict[str, dict[str, str]] | None = None) -> list[TrialRecord]:
    """A trial record per model, compute time and builder (configured by `options`, by builder), its
    rate what `true` predicts."""
    records = []
    for graph, rows in MODELS:
        for compute_s in compute_times:
            prof = profile(graph, compute_s, rows)
            for builder in builders:
                strategy = build_strategy(builder, graph, spec, (options or {}).get(builder))
                records.append(TrialRecord(recorded_at="2026-11-23T03:00:00", cluster_key=f"{len(spec.nodes)}-hosts",
                                           workload="w", spec=spec, strategy=strategy, profile=prof, network=net,
                                           steps_per_s=1 / predict(strategy, prof, spec, net, true).step_s))
    return records
