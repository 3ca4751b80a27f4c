"""`adrun profile --hosts`: host counts parsed, a spec and network of N hosts synthesised from the
cluster one has, every builder and Auto predicted at each count, the report's JSON, and the plot."""

from __future__ import annotations

import pytest

from adrun.errors import UserError
from adrun.graph_item import GraphItem
from adrun.profile.report import ProfileReport, ScalingSection
from adrun.profile.scaling import MAX_HOSTS, host_link, parse_host_counts, scaled_network, scaled_spec, scaling_section
from adrun.spec import ClusterSpec, NetworkSpec, Node
from adrun.strategies.auto import Auto
from adrun.strategies.cost_model import predict
from adrun.strategies import build_strategy
from adrun.strategies.facts import HostLink, Link, NetworkFacts
from adrun.strategies.fit import fit
from adrun.strategies.planning_facts import PlanningFacts
from tests.support.cost_facts import embed_graph, hosts_spec, network, profile, var

SLOW = 12.5e6  # 100 Mbit/s
# a large embedding whose touched rows all-gathered outweigh its sharded PS traffic beyond 2 hosts
GRAPH = GraphItem(batch_size=256, variables=[var("emb", [1_000_000, 32], "sparse"),
                                             var("h/kernel", [512, 512]), var("h/bias", [512])])
ROWS = {"emb": 8000.0}


def two_host_facts() -> PlanningFacts:
    spec = hosts_spec(2)
    return PlanningFacts(spec=spec, graph=GRAPH, profile=profile(GRAPH, 0.02, ROWS),
                         network=network(spec, SLOW, latency_s=1e-4), fit=fit([]))


@pytest.mark.parametrize("text, counts", [("2,4,8", [2, 4, 8]), ("64, 2,2 ,16", [2, 16, 64]), ("1", [1]),
                                          (str(MAX_HOSTS), [MAX_HOSTS])])
def test_host_counts_are_whole_numbers_sorted_once(text: str, counts: list[int]) -> None:
    assert parse_host_counts(text) == counts


@pytest.mark.parametrize("text, message", [
    ("", "expected comma-separated host counts such as 2,4,8, got ''"),
    ("2,,4", "expected comma-separated host counts such as 2,4,8, got '2,,4'"),
    ("2,four", f"'four' is not a whole number of hosts from 1 to {MAX_HOSTS} (in '2,four')"),
    ("0,2", f"'0' is not a whole number of hosts from 1 to {MAX_HOSTS} (in '0,2')"),
    ("-2", f"'-2' is not a whole number of hosts from 1 to {MAX_HOSTS} (in '-2')"),
    ("2.5", f"'2.5' is not a whole number of hosts from 1 to {MAX_HOSTS} (in '2.5')"),
    (str(MAX_HOSTS + 1), f"'{MAX_HOSTS + 1}' is not a whole number of hosts from 1 to {MAX_HOSTS}"),
])
def test_bad_host_counts_name_the_value(text: str, message: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_host_counts(text)
    assert message in str(error.value)


def test_scaled_spec_repeats_the_node_shapes_with_one_chief() -> None:
    sample = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=2, ps=1, cpus=8),
                                           Node(address="10.0.0.2", workers=1, ps=0, cpus=4)],
                         network=NetworkSpec(bandwidth_mbit=100, latency_ms=0.1))
    spec = scaled_spec(sample, 5)
    assert [(n.workers, n.ps, n.cpus) for n in spec.nodes] == [(2, 1, 8), (1, 0, 4), (2, 1, 8), (1, 0, 4), (2, 1, 8)]
    assert [n.chief for n in spec.nodes] == [True, False, False, False, False]
    assert len({n.address for n in spec.nodes}) == 5 and spec.network is None
    assert (spec.num_workers, spec.num_ps) == (8, 3)
    one = scaled_spec(sample, 1)
    assert (one.num_workers, one.num_ps, one.nodes[0].chief) == (2, 1, True)


def test_every_pair_of_simulated_hosts_gets_the_median_path() -> None:
    spec = hosts_spec(2)
    facts = NetworkFacts(local=Link(bytes_per_s=1e9, latency_s=1e-5, source="measured"), links=[
        HostLink(src="10.0.0.1", dst="10.0.0.2", bytes_per_s=10e6, latency_s=1e-3, source="measured"),
        HostLink(src="10.0.0.2", dst="10.0.0.1", bytes_per_s=12e6, latency_s=2e-3, source="measured", burst_bytes=5e4),
        HostLink(src="10.0.0.1", dst="10.0.0.3", bytes_per_s=90e6, latency_s=1e-4, source="measured"),
    ])
    link, source = host_link(spec, facts)
    assert (link.bytes_per_s, link.latency_s, link.burst_bytes, link.source) == (12e6, 2e-3, 5e4, "measured")
    assert source == "measured, the median of 3 paths between hosts"
    big = scaled_spec(spec, 4)
    net = scaled_network(facts, link, big)
    assert net.local == facts.local and len(net.links) == 4 * 3
    hosts = [n.address for n in big.nodes]
    assert {(x.src, x.dst) for x in net.links} == {(a, b) for a in hosts for b in hosts if a != b}
    assert {x.bytes_per_s for x in net.links} == {12e6}


def test_the_median_path_is_the_measured_paths_median_when_some_were_assumed() -> None:
    """A ring-measured cluster: 3 measured paths (the median 20 MB/s) and 3 assumed at 10 MB/s;
    the assumed copies do not outvote the measured paths (the median of all 6: 10 MB/s)."""
    spec = hosts_spec(3)
    hosts = [n.address for n in spec.nodes]
    measured = {(hosts[0], hosts[1]): 30e6, (hosts[1], hosts[2]): 20e6, (hosts[2], hosts[0]): 10e6}
    facts = NetworkFacts(local=Link(bytes_per_s=1e9, latency_s=1e-5, source="measured"), links=[
        HostLink(src=a, dst=b, bytes_per_s=measured.get((a, b), 10e6), latency_s=1e-4,
                 source="measured" if (a, b) in measured else "assumed")
        for a in hosts for b in hosts if a != b])
    link, source = host_link(spec, facts)
    assert (link.bytes_per_s, link.source) == (20e6, "measured")
    assert source == "measured, the median of 3 paths between hosts"


def test_one_host_takes_the_path_between_hosts_from_the_spec_or_refuses() -> None:
    local = NetworkFacts(local=Link(bytes_per_s=1e9, latency_s=1e-5, source="spec"))
    given = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=1)],
                        network=NetworkSpec(bandwidth_mbit=1000, latency_ms=0.5))
    link, source = host_link(given, local)
    assert (link.bytes_per_s, link.latency_s, link.source) == (125e6, 5e-4, "spec")
    assert source.startswith("spec")
    bare = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=1)])
    with pytest.raises(UserError) as error:
        host_link(bare, local)
    assert "--hosts: the cluster spec has one node" in str(error.value)
    assert "network: {bandwidth_mbit: ..., latency_ms: ...}" in str(error.value)


def test_each_count_is_predicted_as_a_real_cluster_of_that_size() -> None:
    facts = two_host_facts()
    section = scaling_section(facts, Auto(), [1, 2, 4, 8])
    assert section.host_counts == [1, 2, 4, 8] and section.link_mbit_s == pytest.approx(100)
    assert section.curves[-1].builder == "Auto"
    by_builder = {c.builder: {p.hosts: p for p in c.points} for c in section.curves}
    # the oracle: the cost model itself on a hand-made 4-host cluster of the same kind
    spec4 = hosts_spec(4)
    expected = predict(build_strategy("AllReduce", GRAPH, spec4), facts.profile, spec4,
                       network(spec4, SLOW, latency_s=1e-4))
    assert by_builder["AllReduce"][4].step_s == pytest.approx(expected.step_s)
    assert by_builder["AllReduce"][4].examples_per_s == pytest.approx(256 * 4 / expected.step_s)
    # one host: nothing crosses between hosts; efficiency is examples/s over N x the compute-bound rate
    one = by_builder["AllReduce"][1]
    assert one.efficiency == pytest.approx(one.examples_per_s / (256 / 0.02))
    # the all-gather grows with the hosts, the sharded PS does not: all-reduce falls behind
    ar, pps = by_builder["AllReduce"], by_builder["PartitionedPS"]
    assert ar[8].step_s > ar[4].step_s > ar[2].step_s
    assert pps[8].step_s < ar[8].step_s
    # Auto is never predicted slower than a built-in plan at any count
    for hosts in (2, 4, 8):
        assert by_builder["Auto"][hosts].step_s <= min(b[hosts].step_s for b in by_builder.values() if hosts in b) + 1e-12
    # every host has a PS, so every builder plans every count
    assert all(set(points) == {1, 2, 4, 8} for points in by_builder.values())


def test_the_section_travels_in_the_report_json() -> None:
    section = scaling_section(two_host_facts(), Auto(), [2, 4])
    again = ScalingSection.model_validate_json(section.model_dump_json())
    assert again == section
    assert "scaling" in ProfileReport.model_fields
    assert any("Horovod" in a for a in again.anchors)


def test_the_plot_is_a_png_and_an_unwritable_path_is_one_message(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from adrun.profile.plot import write_scaling_plot

    section = scaling_section(two_host_facts(), Auto(), [1, 2, 4])
    out = tmp_path / "scaling.png"
    write_scaling_plot(section, out, "train.py: predicted scaling")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    with pytest.raises(UserError) as error:
        write_scaling_plot(section, tmp_path / "missing" / "s.png", "t")
    assert str(error.value).startswith(f"--plot {tmp_path / 'missing' / 's.png'}: cannot write the plot")


def test_pooled_lookups_show_in_the_predicted_bytes_per_host() -> None:
    """The same terms as the cost model's: the embed workload's PartitionedPS at 4 hosts sends
    fewer bytes from its busiest host, and steps faster, with its table's pooled lookups than
    without them; the all-reduce of every variable moves the same rows either way. The figures are
    test_cost_model_pooled's by hand (3,296,070 and 1,975,110 B: the table's 4 shards and the
    head's ring, 1.5x its bytes), the head here on the 4 PS tasks (also 1.5x its bytes a host)
    but for its [1] bias, whose PS host sends it to 3 workers (12 B) instead of its ring share (6 B)."""
    def at_4_hosts(graph: GraphItem) -> dict:
        spec = hosts_spec(2)
        facts = PlanningFacts(spec=spec, graph=graph, profile=profile(graph, 0.0055, {"embedding": 8160}),
                              network=network(spec, SLOW, latency_s=1e-4), fit=fit([]))
        return {c.builder: c.points[0] for c in scaling_section(facts, Auto(), [4]).curves}

    rows, pooled = at_4_hosts(embed_graph(pooled=False)), at_4_hosts(embed_graph())
    assert rows["PartitionedPS"].sent_mb_per_host == pytest.approx((3_296_070 - 6 + 12) / 1e6, abs=1e-9)
    assert pooled["PartitionedPS"].sent_mb_per_host == pytest.approx((1_975_110 - 6 + 12) / 1e6, abs=1e-9)
    assert pooled["PartitionedPS"].step_s < rows["PartitionedPS"].step_s
    assert pooled["AllReduce"] == rows["AllReduce"]
