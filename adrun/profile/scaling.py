"""`adrun profile --hosts 2,4,8,...`: what every builder and Auto would do on more hosts of the
same kind, predicted by the cost model instead of tried.

The cluster one has is the sample: its nodes' shapes (workers and PS processes per host) are
repeated to make a spec of N hosts (`scaled_spec`), and its network facts (measured, stored or
the spec's `network:` figures) give every path between two of the N hosts the figures of one
representative path (`host_link`). The model profile (compute time and rows touched per worker's
step at the script's batch) does not depend on the number of workers, so it is reused as it is;
the graph is the one captured. Each host count is then planned and predicted exactly as the real
cluster is (`Auto.rank`), with the same coefficients. Pure: no TensorFlow, no network.
"""

from __future__ import annotations

from adrun.errors import UserError
from adrun.profile.report import ScalingCurve, ScalingPoint, ScalingSection, same_plan
from adrun.spec import ClusterSpec
from adrun.strategies.auto import AUTO, Auto
from adrun.strategies.facts import HostLink, Link, NetworkFacts
from adrun.strategies.planning_facts import PlanningFacts

MAX_HOSTS = 64  # the model has N^2 paths and Auto searches N shard counts: 64 hosts take minutes


def parse_host_counts(text: str) -> list[int]:
    """`2,4,8` -> [2, 4, 8] (sorted, without repeats). ValueError naming what is wrong."""
    words = [w.strip() for w in text.split(",")]
    if not text.strip() or any(not w for w in words):
        raise ValueError(f"expected comma-separated host counts such as 2,4,8, got '{text}'")
    bad = [w for w in words if not (w.isascii() and w.isdigit()) or not 1 <= int(w) <= MAX_HOSTS]
    if bad:
        raise ValueError(f"'{bad[0]}' is not a whole number of hosts from 1 to {MAX_HOSTS} (in '{text}')")
    return sorted({int(w) for w in words})


def scaled_spec(spec: ClusterSpec, hosts: int) -> ClusterSpec:
    """A spec of `hosts` hosts of the kind of `spec`'s: host i has the shape (workers, PS, CPUs,
    devices) of node i mod len(spec.nodes), the first is the chief. Addresses are placeholders
    (`sim-host-1`, ...): a simulated cluster is never reached. Its network is given separately."""
    nodes = [
        spec.nodes[i % len(spec.nodes)].model_copy(update={"address": f"sim-host-{i + 1}", "chief": i == 0})
        for i in range(hosts)
    ]
    return ClusterSpec.model_validate({**spec.model_dump(exclude={"nodes", "network"}),
                                       "nodes": [n.model_dump() for n in nodes]})


def host_link(spec: ClusterSpec, network: NetworkFacts) -> tuple[Link, str]:
    """The path every pair of simulated hosts gets, and where it comes from: the median (by
    bandwidth; the lower one of an even count) of the paths between `spec`'s hosts, of the
    measured ones when there are any (a cluster of more than 4 nodes measures rings and assumes
    the other pairs from them, network_facts.py: copies that would outvote the measured paths),
    else the spec's `network:` figures for paths between nodes. UserError when neither exists (a
    one-host cluster whose spec gives no figures: nothing says what a path between hosts would
    carry)."""
    if network.links:
        measured = [link for link in network.links if link.source == "measured"]
        ordered = sorted(measured or network.links, key=lambda link: link.bytes_per_s)
        median = ordered[(len(ordered) - 1) // 2]
        what = "the only path" if len(ordered) == 1 else f"the median of {len(ordered)} paths"
        return Link.model_validate(median.model_dump(exclude={"src", "dst"})), f"{median.source}, {what} between hosts"
    require_host_path(spec)
    figures = spec.network
    assert figures is not None and figures.bandwidth_mbit is not None and figures.latency_ms is not None
    link = Link(bytes_per_s=figures.bandwidth_mbit * 1e6 / 8, latency_s=figures.latency_ms / 1e3, source="spec")
    return link, "spec, the network figures for paths between nodes"


def require_host_path(spec: ClusterSpec) -> None:
    """UserError when nothing can say what a path between two hosts carries: a one-host cluster
    whose spec gives no `network:` figures for paths between nodes (several hosts are measured)."""
    figures = spec.network
    if len(spec.nodes) == 1 and (figures is None or figures.bandwidth_mbit is None):
        raise UserError(
            "--hosts: the cluster spec has one node, so there is no path between hosts to measure; give its "
            "figures in the spec: `network: {bandwidth_mbit: ..., latency_ms: ...}` (e.g. 1000 and 0.1 for "
            "1 Gbit Ethernet)"
        )


def scaled_network(network: NetworkFacts, link: Link, spec: ClusterSpec) -> NetworkFacts:
    """`network`'s path inside a host (and CPUs the hosts share, if any), and `link` between every
    ordered pair of `spec`'s hosts."""
    hosts = [node.address for node in spec.nodes]
    return network.model_copy(update={"links": [
        HostLink(src=a, dst=b, **link.model_dump()) for a in hosts for b in hosts if a != b
    ]})


def scaling_section(facts: PlanningFacts, auto: Auto, host_counts: list[int]) -> ScalingSection:
    """Every builder's and Auto's predicted step and examples/s at each host count (see the module
    docstring). `facts` are the real cluster's, profile, network and fit included."""
    assert facts.profile is not None and facts.network is not None and facts.fit is not None
    link, source = host_link(facts.spec, facts.network)
    profile = facts.profile
    per_host = [node.workers * node.replicas_per_worker for node in facts.spec.nodes]
    curves: dict[str, list[ScalingPoint]] = {}
    auto_builders: dict[int, str] = {}
    for hosts in host_counts:
        spec = scaled_spec(facts.spec, hosts)
        scaled = PlanningFacts(spec=spec, graph=facts.graph, profile=profile,
                               network=scaled_network(facts.network, link, spec), fit=facts.fit)
        ranked = auto.rank(scaled)
        one_host_rate = None
        if profile.batch_size is not None:
            replicas = sum(per_host[i % len(per_host)] for i in range(hosts))
            one_host_rate = profile.batch_size * replicas / profile.compute_s
        for plan, prediction in ranked:
            curves.setdefault(plan.builder, []).append(ScalingPoint(
                hosts=hosts, step_s=prediction.step_s, examples_per_s=prediction.examples_per_s,
                efficiency=(prediction.examples_per_s / one_host_rate
                            if prediction.examples_per_s is not None and one_host_rate else None),
                bound=prediction.bound,
                sent_mb_per_host=max((b.sent for b in prediction.node_bytes.values()), default=0.0) / 1e6))
        auto_plan = next(plan for plan, _ in ranked if plan.builder == AUTO)
        same = [plan.builder for plan, _ in ranked if plan.builder != AUTO and same_plan(plan, auto_plan)]
        if same:
            auto_builders[hosts] = same[0]
    order = sorted(curves, key=lambda b: (b == AUTO, b))
    return ScalingSection(
        host_counts=host_counts, workers_per_host=[n.workers for n in facts.spec.nodes],
        ps_per_host=[n.ps for n in facts.spec.nodes], link_mbit_s=link.bytes_per_s * 8 / 1e6,
        link_latency_ms=link.latency_s * 1e3, link_source=source,
        curves=[ScalingCurve(builder=b, points=curves[b]) for b in order], auto_builders=auto_builders,
    )

