"""Stand-ins for the slow parts of planning (the capture, the profiling run, the network
measurement), the terminal's status lines and a job's SSH connections, for tests of gathering facts
and choosing plans: each remembers how it was called, and the records database stays real.

The script's process is faked at the launcher's seam: `capture_graph` (a capture of its own) and
`CaptureThenProfile` (one process: the graph, then the profile if asked); what that process would
measure goes through the real `profile_of`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from adrun.graph_item import GraphItem
from adrun.profile_samples import ProfileSamples
from adrun.spec import ClusterSpec
from adrun.strategies.facts import NetworkFacts

TIMED_STEPS = 10


class SlowParts:
    """`graph` is what a capture finds, `rows` the distinct rows per step of its sparse variables in
    the profile (each step the same, timed at 10 ms), `network` what a measurement gives; `timed`
    False makes the profiling run end before a timed step (NoStepTimed).

    `starts`: processes of the script started (a capture's, or a CaptureThenProfile's); `captures`:
    graphs read from them; `profiles`: profiles asked of them, with the warm-up they ran."""

    def __init__(self, graph: GraphItem, rows: Mapping[str, int], network: NetworkFacts) -> None:
        self.graph, self.rows, self.network = graph, dict(rows), network
        self.timed = True
        self.starts: list[tuple[Path, list[str], int, str]] = []
        self.captures: list[tuple[Path, list[str], int, str]] = []
        self.profiles: list[tuple[Path, list[str], int, str, int]] = []
        self.measures: list[ClusterSpec] = []
        self.status: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> SlowParts:
        monkeypatch.setattr("adrun.capture_run.capture_graph", self.capture_graph)
        monkeypatch.setattr("adrun.capture_run.CaptureThenProfile", self.capture_then_profile)
        monkeypatch.setattr("adrun.launch.nodes.network_facts.network_facts", self.network_facts)
        monkeypatch.setattr("adrun.ui.print_status", self.status.append)
        return self

    def capture_graph(self, script: Path, args: list[str], num_workers: int, job_id: str) -> GraphItem:
        self.starts.append((script, args, num_workers, job_id))
        self.captures.append((script, args, num_workers, job_id))
        return self.graph

    def capture_then_profile(self, script: Path, args: list[str], num_workers: int, job_id: str,
                             profile_steps: tuple[int, int]) -> _FakeRun:
        self.starts.append((script, args, num_workers, job_id))
        return _FakeRun(self, (script, args, num_workers, job_id), profile_steps[0])

    def samples(self) -> ProfileSamples:
        return ProfileSamples(graph=self.graph, training_steps=1 + TIMED_STEPS * self.timed,
                              step_s=[0.01] * TIMED_STEPS * self.timed,
                              rows={name: [n] * TIMED_STEPS for name, n in self.rows.items()} if self.timed else {})

    def network_facts(self, spec: ClusterSpec, remote: Any, report: Any = None) -> NetworkFacts:
        self.measures.append(spec)
        return self.network


class _FakeRun:
    """A CaptureThenProfile that remembers what was asked of it (SlowParts)."""

    def __init__(self, parts: SlowParts, start: tuple[Path, list[str], int, str], warmup: int) -> None:
        self._parts, self._start, self._warmup = parts, start, warmup
        self._captured = False

    def __enter__(self) -> _FakeRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        pass

    def graph(self) -> GraphItem:
        if not self._captured:
            self._captured = True
            self._parts.captures.append(self._start)
        return self._parts.graph

    def profile_samples(self) -> ProfileSamples:
        self._parts.profiles.append((*self._start, self._warmup))
        return self._parts.samples()


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
