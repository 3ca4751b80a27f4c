"""Stand-ins for the slow parts of planning (the capture, the profiling run, the network
measurement), the terminal's status lines and a job's SSH connections, for tests of gathering facts
and choosing plans: each remembers how it was called, and the records database stays real."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from adrun.graph_item import GraphItem
from adrun.profile.run import NoStepTimed
from adrun.spec import ClusterSpec
from adrun.strategies.facts import ModelProfile, NetworkFacts
from tests.support.cost_facts import profile


class SlowParts:
    """`graph` is what a capture finds, `rows` the distinct rows per step of its sparse variables in
    the profile, `network` what a measurement gives; `timed` False makes the profiling run end before
    a timed step (NoStepTimed)."""

    def __init__(self, graph: GraphItem, rows: Mapping[str, float], network: NetworkFacts) -> None:
        self.graph, self.rows, self.network = graph, dict(rows), network
        self.timed = True
        self.captures: list[tuple[Path, list[str], int, str]] = []
        self.profiles: list[tuple[Path, list[str], int, str, int]] = []
        self.measures: list[ClusterSpec] = []
        self.status: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> SlowParts:
        monkeypatch.setattr("adrun.capture_run.capture_graph", self.capture_graph)
        monkeypatch.setattr("adrun.profile.run.profile_model", self.profile_model)
        monkeypatch.setattr("adrun.launch.nodes.network_facts.network_facts", self.network_facts)
        monkeypatch.setattr("adrun.ui.print_status", self.status.append)
        return self

    def capture_graph(self, script: Path, args: list[str], num_workers: int, job_id: str) -> GraphItem:
        self.captures.append((script, args, num_workers, job_id))
        return self.graph

    def profile_model(self, script: Path, args: list[str], num_workers: int, job_id: str, warmup: int) -> ModelProfile:
        self.profiles.append((script, args, num_workers, job_id, warmup))
        if not self.timed:
            raise NoStepTimed(f"{script}: ran 1 training step(s), all of them warm-up (1), so no step was timed",
                              "let it run longer", self.graph)
        return profile(self.graph, 0.01, self.rows)

    def network_facts(self, spec: ClusterSpec, remote: Any) -> NetworkFacts:
        self.measures.append(spec)
        return self.network


class FakeRemote:
    """Stands in for RemoteNodes (launch/job/provision.py): other nodes, connected at most once."""

    def __init__(self, nodes: Sequence[str] = ("10.0.0.2",), connected: bool = False) -> None:
        self.nodes = list(nodes)
        self.links: dict[str, object] = {node: object() for node in self.nodes} if connected else {}
        self.connects = 0

    def connect(self) -> None:
        assert not self.links, "already connected"
        self.connects += 1
        self.links = {node: object() for node in self.nodes}
