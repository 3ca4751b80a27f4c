"""Bandwidth and latency of a cluster's paths, for the cost model: measured, or as the spec gives them.

Given (the spec's `network` field): every path gets the spec's figures, source "spec", and
nothing is measured.

Measured, with transfers between standing probes, one per node for the whole measurement
(launch/nodes/standing_probes.py; their timings in bench/RESULTS-auto-start.md):
- `local`: the chief node's loopback (a one-machine cluster is modelled on what it really has),
  measured alone, first;
- the pairs of distinct nodes, each direction on its own (links may be asymmetric), in rounds
  of transfers that share no node, the transfers of a round at the same time (pair_schedule.py).
  Which pairs (`measures_every_pair`, the one place of the rule): every ordered pair when the full
  schedule takes at most FULL_ROUNDS rounds (2(N-1) for even N, 2N for odd: N <= 4, 6 rounds).
  A larger cluster, whose full schedule would grow with N^2 pairs (8 nodes: 14 rounds), measures
  rings instead, in which every node sends once and receives once: always two, node i to node i+1
  and node i to node i+2 (one ring cannot tell alike hosts from hosts whose every ring link touches
  a slow one: 8 hosts of alternating 1000 and 100 Mbit/s ports read 100 on every link of ring +1),
  4 rounds for N divisible by 4, 5 for N = 2 (mod 4), 6 for odd N (pair_schedule.ring_rounds: 2
  rounds a ring, 3 for a ring with cycles of odd length). When the measured rates disagree with
  what pair_inference.py's rule assumes from them (a path slower than both its ends), a third ring
  the other way (i -> i-1; 2 rounds more, 3 for odd N), said through `report`, and said again if
  they still disagree. Every pair not measured is "assumed" by the rule (the slower of its sender's
  best send and its receiver's best receive: alike hosts all get the measured figures), and the
  facts say it: each link's `source` in the records, and a line through `report` naming how many
  pairs were measured, in how many rounds, and whether the measured rates differed (then the
  assumed pairs are the rule's, not copies). Unseen: a fast host whose ring partners (i-2, i-1,
  i+1, i+2) are all slower reads as slow, so its path to another fast host is assumed slow.
Nodes that share one machine's CPUs (below) also share them between a round's transfers: a link
the CPUs bound (an unshaped veth) reads lower when another transfer runs beside it (measured 3.0 to
19.6 Gbit/s together against 7.6 to 10.6 alone), a shaped one does not (100 Mbit/s: every rate
within 0.2 % of the shaper's, alone or not). So on shared CPUs, a round whose rates add up to more
than CPU_SHARE of the loopback's (the machine's CPU-bound rate) is measured again one transfer at a
time, and so is every later round, of every ring (then a ring takes N transfers' time: unshaped
links on one machine, as the benchmark's namespace hosts, not a cluster of machines).
Each transfer times PINGS one-byte round trips on its connection
(latency: half the median round trip) and then streams at most TRANSFER_BYTES for at most STREAM_S
seconds (bandwidth: from the stream's arrivals as the receiver's kernel timed them, one at each
1/64 of its bytes: their bytes over their time past the token bucket's burst, pauses left out,
transfer.steady_rate, so that a probe descheduled on a busy machine, which
leaves the link idle for a moment or answers late, does not read the link slow). Between two nodes it also measures a shaper on the path
(launch/nodes/link_shape.py): the token bucket (`Link.burst_bytes`) from the stream's start, and the
sender's queue (`Link.queue_bytes`, in bytes of the measured rate) from a UDP blast after it, about
0.45 s more per pair (measured on namespace hosts: a transfer takes about 0.85 s at 100 Mbit/s, its
stream 0.58 s of it). 0 for both means none known: a
path without a shaper, and also UDP filtered (a hello first; unheard, no blast), a link faster than
about half the blast, a queue longer than the blast (it sends about probe.BLAST_S of the stream's
rate: a 10 Mbit/s link behind a 1000-packet FIFO, 1.2 s of it, never overflows; the receiver's
cutoff, BLAST_DRAIN_S after the blast, caps the drain it sees), a queue bigger than the blast's send
buffers (net.core.wmem_max where the probe cannot force them), or a failure of this stage, which
leaves the bandwidth and latency standing and is reported (`report`, naming the pair and why) so
that it is not taken for a path without a shaper. The loopback is not probed for one (nothing shapes
it). The transfers run between standing probes (launch/nodes/standing_probes.py): one per node,
and a spare on the chief for the loopback, started at once before the loopback and kept for the
whole measurement, so that a round costs its transfers and not the start of two processes over SSH
for each (on 8 namespace hosts a round of 4 took 2.1 s, 1.1 s of it starting its 8 probes; 0.86 s
with standing probes: bench/RESULTS-auto-start.md). They are stopped however the measurement ends;
each bounds its transfers by launch/nodes/transfer.py's timeouts, and ends by itself when its input
ends or after a long idle time; nothing is left running. A probe that does not start fails the
measurement with one message naming every such node and what its shell said.

Measured, too: whether the nodes share one machine's CPUs (`NetworkFacts.shared_cpus`): every
node's probe says, in its first answer, the kernel's boot id and the CPUs a process started there
may use; when more than one node answers and all with the same id (network namespaces or
containers of one kernel, as the benchmark's hosts are), their compute, their tasks' RPC work and
the traffic between them run on the same CPUs, and the facts say how many (the most any node may use).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from adrun.errors import UserError
from adrun.spec import ClusterSpec, Node
from adrun.strategies.facts import HostLink, Link, NetworkFacts

from .hosts import is_local_host
from .pair_inference import assumed_links, off_the_rule, slower_than_fastest
from .pair_schedule import Pair, pair_rounds, ring_rounds
from .parallel import each
from .shell import LocalShell, SSHShell
from .standing_probes import StandingProbes
from .transfer import Endpoint, Transfer, TransferError

if TYPE_CHECKING:  # the job's connections, when there are; nodes/ does not depend on job/ at run time
    from ..job.provision import RemoteNodes

PINGS = 20
TRANSFER_BYTES = 64 << 20  # a loopback moves this in tens of ms; a 100 Mbit/s link stops at STREAM_S
# a 100 Mbit/s link streams 6 MB in this: its rate within 0.2 % of the shaper's, as 2 s read it; 0.25 s
# read one of 12 pairs 21 % slow
STREAM_S = 0.5
FULL_ROUNDS = 6  # every ordered pair when that takes at most this many rounds (N <= 4); beyond, rings
RING_SHIFTS = (1, 2, -1)  # the rings a larger cluster may measure, in this order: node i sends to i + shift
FIRST_RINGS = 2  # of RING_SHIFTS, always measured; each further one while the rule disagrees (module docstring)
HETEROGENEOUS = 0.2  # rates disagree when one is off by more than this share (module docstring)
CPU_SHARE = 0.25  # on shared CPUs, a round's transfers together at most this share of the loopback's rate


def network_facts(spec: ClusterSpec, remote: RemoteNodes | None = None,
                  report: Callable[[str], None] | None = None) -> NetworkFacts:
    """The network of `spec`: its `network` field, else measured. `remote` (connected) reaches
    the nodes that are not this machine; None for a cluster on this machine only. `report` gets a
    line for each pair whose shaper could not be measured and, on a cluster measured by rings, for
    each further ring and for how many pairs were measured and assumed (e.g.
    `adrun.ui.print_status`; a callable, because nodes/ does not depend on the terminal's
    module). Raises UserError when a node's probe does not start or a transfer fails."""
    if spec.network is not None:
        return _given(spec)
    endpoints = {node.address: _endpoint(node, remote) for node in spec.nodes}
    chief = spec.chief.address
    try:
        with StandingProbes(list(endpoints.values()), spare=endpoints[chief]) as probes:
            return _measured(spec, probes, endpoints, report or (lambda line: None))
    except TransferError as e:  # from starting the probes: a transfer's own says its path (_measure)
        raise _cannot("", e) from None


def _measured(spec: ClusterSpec, probes: StandingProbes, endpoints: dict[str, Endpoint],
              say: Callable[[str], None]) -> NetworkFacts:
    shared_cpus = _shared_cpus(list(probes.machines.values()))
    chief = spec.chief.address
    loopback = _measure(probes, endpoints[chief], endpoints[chief], "127.0.0.1")
    addresses = [node.address for node in spec.nodes]
    cpu_bound = None if shared_cpus is None else CPU_SHARE * loopback.bytes_per_s
    rounds = _Rounds(probes, endpoints, cpu_bound)
    if measures_every_pair(len(addresses)):
        done = rounds.measure(pair_rounds(addresses))
    else:
        done = _rings(addresses, rounds, say)
    for (a, b), transfer in done.items():
        if transfer.shape_error is not None:
            say(f"network {a} -> {b}: token bucket and queue not measured (taken as none): "
                f"{transfer.shape_error}")
    measured = [_host_link(pair, transfer) for pair, transfer in done.items()]
    assumed = {(link.src, link.dst): link for link in assumed_links(addresses, measured)}
    if assumed:
        differ = slower_than_fastest(measured, HETEROGENEOUS)
        how = "by the rule (the measured rates differ)" if differ else "alike"
        say(f"network: {len(measured)} of {len(measured) + len(assumed)} ordered pairs of nodes measured "
            f"({len(done) // len(addresses)} rings, {rounds.count} rounds); the other {len(assumed)} "
            f"assumed {how}: each as the slower of its sender's fastest measured send and its receiver's fastest "
            "measured receive, the latency the sum of its two nodes' least less the least of all (source "
            "'assumed' in the facts)")
    by_pair = {(link.src, link.dst): link for link in measured} | assumed
    links = [by_pair[pair] for pair in itertools.permutations(addresses, 2) if pair in by_pair]
    return NetworkFacts(local=_link(loopback), links=links, shared_cpus=shared_cpus)


def measures_every_pair(nodes: int) -> bool:
    """Whether a cluster of `nodes` nodes has every ordered pair measured (else rings and the
    rest assumed): when the full schedule takes at most FULL_ROUNDS rounds (module docstring)."""
    return len(pair_rounds([str(i) for i in range(nodes)])) <= FULL_ROUNDS


def _rings(addresses: list[str], rounds: _Rounds, say: Callable[[str], None]) -> dict[Pair, Transfer]:
    """The first FIRST_RINGS rings of RING_SHIFTS, then each further one while the measured rates
    disagree with what the rule assumes from them all (module docstring). Each further ring, and
    a sample still disagreeing after the last, said."""
    done: dict[Pair, Transfer] = {}
    for count, shift in enumerate(RING_SHIFTS, 1):
        done.update(rounds.measure(ring_rounds(addresses, shift)))
        if count < FIRST_RINGS:
            continue
        measured = [_host_link(pair, transfer) for pair, transfer in done.items()]
        off = off_the_rule(measured, HETEROGENEOUS)
        if not off:
            break
        slow = ", ".join(f"{link.src} -> {link.dst} {link.bytes_per_s * 8 / 1e6:.1f} Mbit/s" for link in off[:3])
        what = (f"network: {count} rings' rates disagree with the rule by more than {HETEROGENEOUS:.0%} "
                f"({len(off)} of {len(measured)} pairs: {slow})")
        if count < len(RING_SHIFTS):
            say(f"{what}; measuring another ring (node i to node i{RING_SHIFTS[count]:+d})")
        else:
            say(f"{what}; the assumed pairs may be off: measure again (`--measure-network`) or give the "
                "figures in the cluster spec's `network` field")
    return done


class _Rounds:
    """Measures rounds of pairs: each round's transfers at the same time; with `cpu_bound`
    (bytes/s; the nodes share CPUs), a round whose rates add up to more is measured again one
    transfer at a time, as is every later round, also of a later call (module docstring)."""

    def __init__(self, probes: StandingProbes, endpoints: dict[str, Endpoint], cpu_bound: float | None) -> None:
        self.probes, self.endpoints, self.cpu_bound = probes, endpoints, cpu_bound
        self.together = True
        self.count = 0  # rounds measured (a round measured again alone counts once)

    def measure(self, rounds: Sequence[Sequence[Pair]]) -> dict[Pair, Transfer]:
        done: dict[Pair, Transfer] = {}
        for pairs in rounds:
            self.count += 1
            if self.together and len(pairs) > 1:
                measured = dict(zip(pairs, each(pairs, self._one), strict=True))
                rate = sum(transfer.bytes_per_s for transfer in measured.values())
                self.together = self.cpu_bound is None or rate <= self.cpu_bound
                if self.together:
                    done.update(measured)
                    continue
            done.update((pair, self._one(pair)) for pair in pairs)
        return done

    def _one(self, pair: Pair) -> Transfer:
        return _measure(self.probes, self.endpoints[pair[0]], self.endpoints[pair[1]], pair[1])


def _given(spec: ClusterSpec) -> NetworkFacts:
    network = spec.network
    assert network is not None

    def link(src: str, dst: str) -> Link:
        figures = network.figures(src, dst)
        return Link(bytes_per_s=figures.bandwidth_mbit * 1e6 / 8, latency_s=figures.latency_ms / 1e3, source="spec")

    chief = spec.chief.address
    return NetworkFacts(
        local=link(chief, chief),
        links=[HostLink(src=a, dst=b, **link(a, b).model_dump())
               for a, b in itertools.permutations([node.address for node in spec.nodes], 2)],
    )


def _endpoint(node: Node, remote: RemoteNodes | None) -> Endpoint:
    if is_local_host(node.address):
        return Endpoint(node, LocalShell(), True)
    link = remote.links.get(node.address) if remote is not None else None
    if link is None:
        raise UserError(f"cannot measure the network: {node.address} is not connected (an adrun bug)")
    return Endpoint(node, SSHShell(link.conn), False)


def _measure(probes: StandingProbes, sender: Endpoint, receiver: Endpoint, host: str) -> Transfer:
    loopback = sender is receiver
    path = "loopback" if loopback else f"{sender.node.address} -> {receiver.node.address}"
    try:
        return probes.measure(sender, receiver, host, TRANSFER_BYTES, pings=PINGS, max_s=STREAM_S, shape=not loopback)
    except TransferError as e:
        raise _cannot(f" ({path})", e) from None


def _cannot(path: str, error: TransferError) -> UserError:
    return UserError(f"cannot measure the network{path}: {error}; run `adrun cluster check`, or give the figures in "
                     "the cluster spec's `network` field")


def _host_link(pair: Pair, done: Transfer) -> HostLink:
    return HostLink(src=pair[0], dst=pair[1], **_link(done).model_dump())


def _link(done: Transfer) -> Link:
    return Link(bytes_per_s=done.bytes_per_s, latency_s=done.latency_s, burst_bytes=done.burst_bytes,
                queue_bytes=done.queue_bytes, source="measured")


def _shared_cpus(machines: Sequence[tuple[str, int] | None]) -> int | None:
    """The usable CPUs of the one machine every node runs on (the most any node may use), from each
    node's (boot id, CPUs) as its probe said; None for one node, for nodes on different machines,
    or when a node cannot tell (no Linux /proc)."""
    if len(machines) < 2 or None in machines:
        return None
    known = [machine for machine in machines if machine is not None]
    return max(cpus for _, cpus in known) if len({boot_id for boot_id, _ in known}) == 1 else None
