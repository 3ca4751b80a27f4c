"""The network facts of node pairs that were not measured, from those that were (the rule).

A cluster of more nodes than the full schedule measures in budget (network_facts.py) measures a
sample of its ordered pairs: rings in which every node sends once and receives once. Every other
pair is `assumed` by one rule, which models a switched network whose hosts' own ports (NIC,
shaper, virtual machine's allowance) bound their paths, the core not:

- its rate, bucket and queue are those of the slower of two measured links: its sender's fastest
  measured send and its receiver's fastest measured receive (a path is as fast as the slower of
  its two ends; a node's best figure is the one least held back by its partner); a measured pair
  the rule would assume otherwise (`disagreeing`) is a path slower than its ends, which it cannot
  capture: network_facts.py then measures more rings and says so;
- its latency is the larger of its two nodes' least measured latency (a node far from the others
  shows its delay on every pair it is in; a near one shows the least on some pair).

On a cluster of alike hosts every assumed pair gets the measured figures (the homogeneous
cluster); a host with a slower port makes every pair it sends or receives on as slow as it, once
its neighbours were also measured with another partner (the ring the other way, which
network_facts.py measures when the first ring's rates disagree). The cost model reads every ordered pair's rate,
bucket and latency, and each host's fastest outgoing link's queue (strategies/cost_model.py,
`Paths.of`), so every pair gets all four figures.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from adrun.strategies.facts import HostLink


class Inference:
    """The assumed links of a cluster, from its measured ones (module docstring). Every node must
    have sent and received at least once among `measured`."""

    def __init__(self, measured: Sequence[HostLink]):
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

    def link(self, src: str, dst: str) -> HostLink:
        """The path `src` -> `dst` by the rule, source "assumed". KeyError naming a node that
        did not send (or receive) in the sample."""
        if src not in self.sends or dst not in self.receives:
            raise KeyError(f"no measured send from {src} or receive at {dst} to assume {src} -> {dst} from")
        send, receive = self.sends[src], self.receives[dst]
        slower = receive if receive.bytes_per_s < send.bytes_per_s else send
        figures = slower.model_dump(exclude={"src", "dst", "source", "latency_s"})
        return HostLink(src=src, dst=dst, latency_s=max(self.nearest[src], self.nearest[dst]), source="assumed",
                        **figures)


def assumed_links(addresses: Sequence[str], measured: Sequence[HostLink]) -> list[HostLink]:
    """Every ordered pair of `addresses` that `measured` leaves out, by the rule."""
    inference = Inference(measured)
    have = {(link.src, link.dst) for link in measured}
    return [inference.link(a, b) for a, b in itertools.permutations(addresses, 2) if (a, b) not in have]


def disagreeing(links: Sequence[HostLink], tolerance: float, rule: Inference | None = None) -> list[HostLink]:
    """The measured `links` whose rate is off what `rule` assumes for them by more than
    `tolerance` (relative): a sample the rule does not explain (`rule` made from `links` itself:
    paths slower than both their ends, which no per-host figure captures). Without `rule`, those
    more than `tolerance` below the fastest of `links`: a first ring, which the rule always
    explains (each node one send and one receive), tells alike hosts by reading one rate."""
    if rule is None:
        fastest = max((link.bytes_per_s for link in links), default=0.0)
        return [link for link in links if link.bytes_per_s < (1 - tolerance) * fastest]
    return [link for link in links if abs(link.bytes_per_s / rule.link(link.src, link.dst).bytes_per_s - 1) > tolerance]
