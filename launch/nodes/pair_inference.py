"""The network facts of node pairs that were not measured, from those that were (the rule).

A cluster of more nodes than the full schedule measures in budget (network_facts.py) measures a
sample of its ordered pairs: rings in which every node sends once and receives once. Every other
pair is `assumed` by one rule, which models a switched network whose hosts' own ports (NIC,
shaper, virtual machine's allowance) bound their paths, the core not:

- its rate, bucket and queue are those of the slower of two measured links: its sender's fastest
  measured send and its receiver's fastest measured receive (a path is as fast as the slower of
  its two ends; a node's best figure is the one least held back by its partners); a measured pair
  the rule would assume otherwise (`off_the_rule`) is a path slower than its ends, which it cannot
  capture: network_facts.py then measures one more ring and says so;
- its latency is the sum of its two nodes' least measured latencies less the least of all (a far
  node shows its delay on every pair it is in, a near one the least on some pair; the least of
  all is a path between two near nodes, counted in both sums once too often): two far nodes get
  both delays, not the larger one.

On a cluster of alike hosts every assumed pair gets the measured figures (the homogeneous
cluster); a host with a slower port makes every pair it sends or receives on as slow as it, once
each of its neighbours was measured with more than one partner (network_facts.py always measures
two rings). What no rule can see: a fast host whose measured partners are all slower reads as slow,
so its paths to the other fast hosts are assumed slow. The cost model reads every ordered pair's rate, bucket
and latency, and each host's fastest outgoing link's queue (strategies/cost_model.py, `Paths.of`),
so every pair gets all four figures.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from adrun.strategies.facts import HostLink


class Inference:
    """The assumed links of a cluster, from its measured ones (module docstring). Every node must
    have sent and received at least once among `measured`."""

    def __init__(self, measured: Sequence[HostLink]) -> None:
        self.sends: dict[str, HostLink] = {}
        self.receives: dict[str, HostLink] = {}
        self.nearest: dict[str, float] = {}
        for link in measured:
            if link.src not in self.sends or link.bytes_per_s > self.sends[link.src].bytes_per_s:
                self.sends[link.src] = link
            if link.dst not in self.receives or link.bytes_per_s > self.receives[link.dst].bytes_per_s:
                self.receives[link.dst] = link
            for node in (link.src, link.dst):
                self.nearest[node] = min(self.nearest.get(node, link.latency_s), link.latency_s)
        self.least = min(self.nearest.values(), default=0.0)

    def link(self, src: str, dst: str) -> HostLink:
        """The path `src` -> `dst` by the rule, source "assumed". KeyError naming a node that
        did not send (or receive) in the sample."""
        if src not in self.sends or dst not in self.receives:
            raise KeyError(f"no measured send from {src} or receive at {dst} to assume {src} -> {dst} from")
        send, receive = self.sends[src], self.receives[dst]
        slower = receive if receive.bytes_per_s < send.bytes_per_s else send
        figures = slower.model_dump(exclude={"src", "dst", "source", "latency_s"})
        latency_s = self.nearest[src] + self.nearest[dst] - self.least
        return HostLink(src=src, dst=dst, latency_s=latency_s, source="assumed", **figures)


def assumed_links(addresses: Sequence[str], measured: Sequence[HostLink]) -> list[HostLink]:
    """Every ordered pair of `addresses` that `measured` leaves out, by the rule."""
    inference = Inference(measured)
    have = {(link.src, link.dst) for link in measured}
    return [inference.link(a, b) for a, b in itertools.permutations(addresses, 2) if (a, b) not in have]


def slower_than_fastest(links: Sequence[HostLink], tolerance: float) -> list[HostLink]:
    """The `links` more than `tolerance` (relative) below the fastest of them: measured rates that
    differ, so the hosts are not alike and the assumed pairs are the rule's, not copies."""
    fastest = max((link.bytes_per_s for link in links), default=0.0)
    return [link for link in links if link.bytes_per_s < (1 - tolerance) * fastest]


def off_the_rule(links: Sequence[HostLink], tolerance: float) -> list[HostLink]:
    """The measured `links` whose rate is off what the rule, made from `links` themselves, assumes
    for them by more than `tolerance` (relative): paths slower than both their ends, which no
    per-host figure captures."""
    rule = Inference(links)
    return [link for link in links
            if abs(link.bytes_per_s / rule.link(link.src, link.dst).bytes_per_s - 1) > tolerance]
