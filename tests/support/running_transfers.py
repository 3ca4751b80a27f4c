"""The network facts' transfers, watched: which transfers between nodes run at the same time, for the
tests of the network facts' rounds (unit: a fake transfer; cluster: the real one between namespace
hosts, through the standing probes)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from adrun.launch.nodes import network_facts as network_facts_module
from adrun.launch.nodes.standing_probes import StandingProbes


class RunningTransfers:
    """Wraps a transfer's measurement (`measure`: sender, receiver, host, nbytes, **kwargs, as
    StandingProbes.measure) and records, per transfer between two nodes in the order started, how
    many ran at once (`most_running`) and whether it ran on the main thread (`on_main`: one at a
    time there; a round measured together runs in a pool's threads), and each node found in two
    running transfers at once (`clashes`). The loopback is not watched."""

    def __init__(self, measure: Callable[..., Any] | None = None):
        self.measure = measure
        self.lock = threading.Lock()
        self.running: list[tuple[str, str]] = []
        self.clashes: list[tuple[str, str]] = []
        self.most_running: list[int] = []
        self.on_main: list[bool] = []

    @property
    def most(self) -> int:
        """The most transfers between nodes that ran at once."""
        return max(self.most_running, default=0)

    def __call__(self, sender, receiver, host, nbytes, **kwargs):
        assert self.measure is not None
        with self.watching(sender, receiver):
            return self.measure(sender, receiver, host, nbytes, **kwargs)

    @contextlib.contextmanager
    def watching(self, sender, receiver) -> Iterator[None]:
        """One transfer from `sender` to `receiver` (endpoints) running while inside."""
        pair = (sender.node.address, receiver.node.address)
        between = pair[0] != pair[1]
        if between:
            with self.lock:
                if {*pair} & {node for running in self.running for node in running}:
                    self.clashes.append(pair)
                self.running.append(pair)
                self.most_running.append(len(self.running))
                self.on_main.append(threading.current_thread() is threading.main_thread())
        try:
            yield
        finally:
            if between:
                with self.lock:
                    self.running.remove(pair)


def watch_standing_probes(monkeypatch) -> RunningTransfers:
    """The network facts measured through StandingProbes whose every transfer is watched."""
    watched = RunningTransfers()

    class Watched(StandingProbes):
        def measure(self, sender, receiver, host, nbytes, **kwargs):
            with watched.watching(sender, receiver):
                return super().measure(sender, receiver, host, nbytes, **kwargs)

    monkeypatch.setattr(network_facts_module, "StandingProbes", Watched)
    return watched
