"""A small graph, a two-host cluster, its profile and its network facts, for the tests of the
records database and of recording runs into it."""

from __future__ import annotations

from adrun.graph_item import GraphItem, VariableInfo
from adrun.spec import ClusterSpec, Node
from adrun.strategies.facts import HostLink, Link, ModelProfile, NetworkFacts, RowsTouched


def item(batch_size: int | None = 32, width: int = 10) -> GraphItem:
    return GraphItem(
        variables=[
            VariableInfo(name="dense/kernel", shape=[width, 4], dtype="float32", trainable=True, grad="dense"),
            VariableInfo(name="emb", shape=[1000, 8], dtype="float32", trainable=True, grad="sparse"),
        ],
        optimizer="GradientDescentOptimizer", batch_size=batch_size,
    )


def two_hosts() -> ClusterSpec:
    return ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=2, ps=1),
                                         Node(address="10.0.0.2", workers=2, ps=1)])


def profile(graph: GraphItem, compute_s: float = 0.01) -> ModelProfile:
    return ModelProfile(graph=graph, compute_s=compute_s, steps_measured=20,
                        rows_touched={"emb": RowsTouched(mean=20.5, max=31)})


def network() -> NetworkFacts:
    return NetworkFacts(local=Link(bytes_per_s=5e9, latency_s=2e-5, source="measured"),
                        links=[HostLink(src="10.0.0.1", dst="10.0.0.2", bytes_per_s=1.25e7, latency_s=1e-3,
                                        source="spec")])
