"""The order in which the network facts measure a cluster's ordered node pairs: rounds of
transfers that may run at the same time, for every pair (`pair_rounds`) or for a ring
(`ring_rounds`, a larger cluster's sample: network_facts.py says which).

Why rounds, and why these: measuring N(N-1) ordered pairs one after another takes N(N-1) transfers'
time (4 nodes on 100 Mbit/s links: 31.9 s measured, with the 2 s streams of then). Transfers that
share no node share no link end (a host's sending and receiving sides, where a switched network's
shapers and NICs sit) and no node's CPUs, so they can run together. A node also never sends and
receives in the same round: the acknowledgements of the stream it receives would wait behind its own
stream in its sending queue (on a shaped link, that queue's 50 ms), which slows the stream it
receives, delays its round trips (the latency) and the blast's answers (the queue). So each round is
a set of disjoint sender -> receiver pairs, at most N/2 of them.

The schedule: the circle method's N-1 perfect matchings of N nodes (a node stands out each
round for odd N), each split into two rounds, one per direction: 2(N-1) rounds for even N, 2N for
odd N, the fewest possible for even N (N(N-1) transfers, N/2 a round).
"""

from __future__ import annotations

from collections.abc import Sequence

Pair = tuple[str, str]  # (sender, receiver)


def matchings(nodes: Sequence[str]) -> list[list[Pair]]:
    """The circle method's perfect matchings: every unordered pair of `nodes` in exactly one, no
    node twice in one. The first node stays put while the others rotate around it; with an odd
    count a placeholder joins, and its partner stands out that round."""
    ring: list[str | None] = [*nodes, None] if len(nodes) % 2 else list(nodes)
    n = len(ring)
    found = []
    for _ in range(n - 1):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        found.append([(a, b) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return found


def pair_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every ordered pair of distinct `nodes` exactly once, in rounds whose pairs share no node;
    each matching measured one way, then the other."""
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"nodes listed twice: {list(nodes)}")
    rounds = []
    for matching in matchings(nodes):
        if matching:
            rounds.append(list(matching))
            rounds.append([(b, a) for a, b in matching])
    return rounds


def ring_rounds(nodes: Sequence[str], shift: int) -> list[list[Pair]]:
    """Node i sends to node i + `shift` (mod N), each node sending once and receiving once: N
    transfers in rounds whose pairs share no node. The permutation falls into gcd(N, shift)
    cycles; along each cycle the transfers alternate between two rounds, and a cycle of odd length
    puts its closing transfer (whose receiver already sends in the first round) in a third: 2
    rounds when every cycle is even, else 3, whatever N."""
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"nodes listed twice: {list(nodes)}")
    n = len(nodes)
    if n < 2 or shift % n == 0:
        raise ValueError(f"a ring needs 2 nodes or more and a shift that is not a multiple of {n}, got {shift}")
    rounds: list[list[Pair]] = [[], [], []]
    seen: set[int] = set()
    for start in range(n):
        if start in seen:
            continue
        cycle = [start]
        while (following := (cycle[-1] + shift) % n) != start:
            cycle.append(following)
        seen.update(cycle)
        odd = len(cycle) % 2
        for k, i in enumerate(cycle):
            closing = odd and k == len(cycle) - 1
            rounds[2 if closing else k % 2].append((nodes[i], nodes[(i + shift) % n]))
    return [pairs for pairs in rounds if pairs]
