"""The cluster spec's `network` field and the network facts it gives, without measuring anything."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from adrun.errors import UserError
from adrun.launch.nodes import network_facts as network_facts_module
from adrun.launch.nodes.network_facts import CPU_SHARE, FULL_ROUNDS, RING_SHIFTS, measures_every_pair, network_facts
from adrun.launch.nodes.pair_schedule import pair_rounds, ring_rounds
from adrun.launch.nodes.link_shape import Blast
from adrun.launch.nodes.probe import DATAGRAM
from adrun.launch.nodes.transfer import Transfer, TransferError
from adrun.spec import ClusterSpec, load_spec, spec_to_yaml
from tests.support.running_transfers import RunningTransfers

TWO_NODES = """\
version: 1
nodes:
  - {{address: 10.0.0.1, chief: true, workers: 1, ps: 1}}
  - {{address: 10.0.0.2, workers: 1}}
network:
{network}
"""


def write(tmp_path: Path, network: str) -> Path:
    path = tmp_path / "cluster.yml"
    path.write_text(TWO_NODES.format(network=network))
    return path


@pytest.fixture(autouse=True)
def no_measuring(monkeypatch):
    def start(*args, **kwargs):
        raise AssertionError("probes started although the spec gives the network")

    monkeypatch.setattr(network_facts_module, "StandingProbes", start)


def test_spec_figures_become_the_facts_without_measuring(tmp_path):
    spec = load_spec(write(tmp_path, """\
  bandwidth_mbit: 100
  latency_ms: 0.5
  local: {bandwidth_mbit: 20000, latency_ms: 0.01}
  links:
    - {src: 10.0.0.2, dst: 10.0.0.1, bandwidth_mbit: 10, latency_ms: 2}"""))
    facts = network_facts(spec)  # no connection to 10.0.0.2: measuring would fail
    assert (facts.local.bytes_per_s, facts.local.latency_s, facts.local.source) == (2.5e9, 1e-5, "spec")
    there, back = facts.link("10.0.0.1", "10.0.0.2"), facts.link("10.0.0.2", "10.0.0.1")
    assert (there.bytes_per_s, there.latency_s, there.source) == (12.5e6, 5e-4, "spec")
    assert (back.bytes_per_s, back.latency_s, back.source) == (1.25e6, 2e-3, "spec")
    assert [(link.src, link.dst) for link in facts.links] == [("10.0.0.1", "10.0.0.2"), ("10.0.0.2", "10.0.0.1")]


def test_top_level_figures_cover_every_path_including_inside_a_node(tmp_path):
    facts = network_facts(load_spec(write(tmp_path, "  bandwidth_mbit: 1000\n  latency_ms: 1")))
    paths = [facts.local, facts.link("10.0.0.1", "10.0.0.2"), facts.link("10.0.0.2", "10.0.0.1")]
    assert [(p.bytes_per_s, p.latency_s, p.source) for p in paths] == [(1.25e8, 1e-3, "spec")] * 3


def test_links_alone_may_give_every_pair(tmp_path):
    facts = network_facts(load_spec(write(tmp_path, """\
  local: {bandwidth_mbit: 8000, latency_ms: 0}
  links:
    - {src: 10.0.0.1, dst: 10.0.0.2, bandwidth_mbit: 80, latency_ms: 1}
    - {src: 10.0.0.2, dst: 10.0.0.1, bandwidth_mbit: 8, latency_ms: 1}""")))
    assert [link.bytes_per_s for link in facts.links] == [1e7, 1e6]
    assert facts.local.latency_s == 0


def test_network_field_round_trips(tmp_path):
    spec = load_spec(write(tmp_path, "  bandwidth_mbit: 100\n  latency_ms: 0.5\n  local: {bandwidth_mbit: 9000, latency_ms: 0.02}"))
    (tmp_path / "again.yml").write_text(spec_to_yaml(spec))
    assert load_spec(tmp_path / "again.yml") == spec


@pytest.mark.parametrize(("network", "messages"), [
    ("  bandwidth_mbit: 0\n  latency_ms: 1", ["network.bandwidth_mbit: must be >= 0.001, got 0"]),
    ("  bandwidth_mbit: 20000000\n  latency_ms: 1", ["network.bandwidth_mbit: must be <= 10000000, got 20000000"]),
    ("  bandwidth_mbit: true\n  latency_ms: -1", ["network.bandwidth_mbit: expected a number, got true",
                                                  "network.latency_ms: must be >= 0, got -1"]),
    ("  bandwidth_mbit: '100'\n  latency_ms: .nan", ["network.bandwidth_mbit: expected a number, got '100'",
                                                     "network.latency_ms: must be a finite number, got nan"]),
    ("  bandwidth_mbit: 100", ["network.latency_ms: give bandwidth_mbit and latency_ms together"]),
    ("  links: []", ["network: no figures for the path inside a node: give bandwidth_mbit and latency_ms "
                     "(every path), or `local`"]),
    ("  bandwidth_mbit: 100\n  latency_ms: 1\n  lat: 2", ["network: unknown field 'lat' (known fields: bandwidth_mbit, latency_ms, local, links)"]),
    ("  local: {bandwidth_mbit: 100, latency_ms: 1}\n"
     "  links: [{src: 10.0.0.1, dst: 10.0.0.2, bandwidth_mbit: 100, latency_ms: 1}]",
     ["network: no figures for 10.0.0.2 -> 10.0.0.1: give bandwidth_mbit and latency_ms for every path between "
      "nodes, or a `links` entry for each"]),
    ("  bandwidth_mbit: 100\n  latency_ms: 1\n"
     "  links: [{src: 10.0.0.1, dst: 10.0.0.9, bandwidth_mbit: 100, latency_ms: 1}]",
     ["network.links[0].dst: '10.0.0.9' is not the address of a node of this spec"]),
    ("  bandwidth_mbit: 100\n  latency_ms: 1\n"
     "  links: [{src: 10.0.0.1, dst: 10.0.0.1, bandwidth_mbit: 100, latency_ms: 1}]",
     ["network.links[0].dst: '10.0.0.1' is the link's own src; the path inside a node is `local`"]),
    ("  bandwidth_mbit: 100\n  latency_ms: 1\n"
     "  links: [{src: 10.0.0.1, dst: 10.0.0.2, bandwidth_mbit: 1, latency_ms: 1},\n"
     "          {src: 10.0.0.1, dst: 10.0.0.2, bandwidth_mbit: 2, latency_ms: 1}]",
     ["network.links[1]: 10.0.0.1 -> 10.0.0.2 given twice (also links[0])"]),
], ids=["zero-bandwidth", "huge-bandwidth", "bool-and-negative", "text-and-nan", "bandwidth-alone", "no-local",
        "typo", "pair-missing", "unknown-node", "self-link", "duplicate-link"])
def test_impossible_network_figures_are_refused_by_field(tmp_path, network, messages):
    path = write(tmp_path, network)
    with pytest.raises(UserError) as refused:
        load_spec(path)
    assert str(refused.value).splitlines() == [f"{path}: {message}" for message in messages]


class FakeRemote:
    """Connected nodes as network_facts reaches them (RemoteNodes.links: address -> NodeLink), by
    default each its own machine of 4 CPUs: `machines` overrides a node's (boot id, CPUs), None
    for one that cannot tell, as its probe would say it."""

    def __init__(self, addresses, machines=None):
        machines = machines or {}
        self.links = {a: SimpleNamespace(conn=SimpleNamespace(machine=machines.get(a, (f"boot-{a}", 4))))
                      for a in addresses}


class FakeProbes:
    """StandingProbes as network_facts uses them, without processes: `measure` (as
    StandingProbes.measure) answers every transfer, and each node's machine is its FakeRemote's.
    Each measurement's nodes and spare are kept in `made`; `left` counts the measurements left."""

    def __init__(self, measure):
        self.measure = measure
        self.made: list[tuple[list[str], str | None]] = []
        self.left = 0

    def __call__(self, endpoints, *, spare=None):
        self.endpoints = list(endpoints)
        self.made.append(([e.node.address for e in endpoints], spare.node.address if spare is not None else None))
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.left += 1

    @property
    def machines(self):
        return {e.node.address: e.shell.conn.machine for e in self.endpoints}


def use_probes(monkeypatch, measure) -> FakeProbes:
    fake = FakeProbes(measure)
    monkeypatch.setattr(network_facts_module, "StandingProbes", fake)
    return fake


def measured_spec(n: int) -> ClusterSpec:
    return ClusterSpec(version=1, nodes=[{"address": f"10.0.0.{i}", "chief": i == 1} for i in range(1, n + 1)])


@pytest.fixture
def transfers(monkeypatch):
    """Every transfer asked for, answered with figures that name the path: 1 MB/s per (src + dst)
    host number; asked to `shape`, a queue of 5 ms and a bucket of 2,000 bytes per dst host number."""
    asked = Asked()

    def measure(sender, receiver, host, nbytes, *, pings, max_s, shape):
        asked.append((sender.node.address, receiver.node.address, host, shape))
        src, dst = int(sender.node.address.rsplit(".")[-1]), int(host.rsplit(".")[-1])
        rate = 1e6 * (src + dst)
        if not shape:
            return Transfer(nbytes=int(rate), seconds=1.0, rtt_s=[4e-4, 2e-4, 6e-4])
        trace = [[i / 100, 2000 * dst + rate * i / 100] for i in range(16)]
        arrival_s = 0.01 + 0.005 * dst  # a shaper's delivery: the rate over the arrival span
        blast = Blast(sent=1000, send_s=0.01, received=round(rate * arrival_s / DATAGRAM), arrival_s=arrival_s)
        return Transfer(nbytes=int(rate), seconds=1.0, rtt_s=[4e-4, 2e-4, 6e-4], trace=trace, blast=blast)

    asked.probes = use_probes(monkeypatch, measure)
    return asked


class Asked(list):
    """The transfers asked for, and the fake probes that measured them."""

    probes: FakeProbes


def test_every_ordered_pair_is_measured_after_the_loopback(transfers):
    spec = measured_spec(3)
    facts = network_facts(spec, FakeRemote([n.address for n in spec.nodes]))
    # one set of probes for the measurement, a spare on the chief for its loopback; left at the end
    assert transfers.probes.made == [(["10.0.0.1", "10.0.0.2", "10.0.0.3"], "10.0.0.1")]
    assert transfers.probes.left == 1
    pairs = [("10.0.0.1", "10.0.0.2"), ("10.0.0.1", "10.0.0.3"), ("10.0.0.2", "10.0.0.1"),
             ("10.0.0.2", "10.0.0.3"), ("10.0.0.3", "10.0.0.1"), ("10.0.0.3", "10.0.0.2")]
    # the loopback first, alone, not probed for a shaper; every pair between nodes once, probed
    assert transfers[0] == ("10.0.0.1", "10.0.0.1", "127.0.0.1", False)
    assert sorted(transfers[1:]) == [(a, b, b, True) for a, b in pairs]
    # the rate: the stream's bytes less the bucket's burst (2,000 bytes per dst host number), over its second
    assert [(link.src, link.dst, link.bytes_per_s, link.source) for link in facts.links] == [
        (a, b, 1e6 * (int(a[-1]) + int(b[-1])) - 2000 * int(b[-1]), "measured") for a, b in pairs]
    assert all(link.latency_s == 2e-4 for link in facts.links)  # half the median round trip
    # the queue: 5 ms per dst host number at the sustained rate (the burst not in it); the bucket:
    # 2,000 bytes per dst host number
    assert [link.queue_bytes for link in facts.links] == pytest.approx(
        [0.005 * int(b[-1]) * (1e6 * (int(a[-1]) + int(b[-1])) - 2000 * int(b[-1])) for a, b in pairs])
    assert [link.burst_bytes for link in facts.links] == pytest.approx([2000 * int(b[-1]) for _, b in pairs])
    assert (facts.local.bytes_per_s, facts.local.source) == (1e6 * (1 + 1), "measured")
    assert (facts.local.burst_bytes, facts.local.queue_bytes) == (0, 0)


class Transfers(RunningTransfers):
    """A fake StandingProbes.measure, watched (tests/support/running_transfers.py): each transfer between
    two nodes waits at a barrier of `together` parties (so a measurement one at a time breaks it),
    the loopback does not, nor the pairs of `alone` (rounds of one transfer). Rates: the loopback
    `loopback_rate`, a pair `pair_rate`, and 1.5 x that when measured a second time."""

    def __init__(self, together: int, loopback_rate: float, pair_rate: float, barrier: bool = True,
                 alone: frozenset = frozenset()):
        super().__init__(self._measure)
        self.barrier = threading.Barrier(together, timeout=60) if barrier else None
        self.loopback_rate, self.pair_rate, self.alone = loopback_rate, pair_rate, alone
        self.times: Counter = Counter()

    def _measure(self, sender, receiver, host, nbytes, *, pings, max_s, shape):
        pair = (sender.node.address, receiver.node.address)
        if pair[0] == pair[1]:
            return Transfer(nbytes=int(self.loopback_rate), seconds=1.0, rtt_s=[1e-5])
        with self.lock:
            self.times[pair] += 1
            again = self.times[pair] > 1
        if self.barrier is not None and pair not in self.alone:
            self.barrier.wait()  # every transfer of the round is running now
        return Transfer(nbytes=int(self.pair_rate * (1.5 if again else 1)), seconds=1.0, rtt_s=[1e-4])


@pytest.mark.parametrize("machine", ["separate", "shared"])
def test_a_round_s_transfers_run_together_and_share_no_node(monkeypatch, machine):
    """Separate machines, or one machine's CPUs with links far slower than its loopback (100 Mbit/s
    against 4 GB/s): the pairs of a round run at the same time (the barrier of 2 would break
    otherwise), no node in two at once, each pair measured once."""
    fake = Transfers(together=2, loopback_rate=4e9, pair_rate=12.5e6)
    use_probes(monkeypatch, fake)
    spec = measured_spec(4)
    addresses = [n.address for n in spec.nodes]
    facts = network_facts(spec, FakeRemote(addresses, same_machine(addresses) if machine == "shared" else None))
    assert fake.clashes == []
    assert set(fake.times.values()) == {1} and len(fake.times) == 12
    assert {link.bytes_per_s for link in facts.links} == {12.5e6}


def test_cpu_bound_links_on_shared_cpus_are_measured_again_one_at_a_time(monkeypatch):
    """One machine's CPUs, links whose rates add up to more than CPU_SHARE of its loopback (an
    unshaped veth): the first round, measured together, is measured again alone and so is every
    later round; the figures kept are those measured alone."""
    fake = Transfers(together=2, loopback_rate=4e9, pair_rate=CPU_SHARE * 4e9 / 2 * 1.01, barrier=False)
    use_probes(monkeypatch, fake)
    spec = measured_spec(4)
    addresses = [n.address for n in spec.nodes]
    first_round = pair_rounds(addresses)[0]
    facts = network_facts(spec, FakeRemote(addresses, same_machine(addresses)))
    assert fake.clashes == []
    assert fake.times == Counter({pair: 2 if pair in first_round else 1 for pair in itertools.permutations(addresses, 2)})
    # the first round (2 transfers) together in the pool; after it, every transfer one at a time
    assert fake.on_main == [False, False] + [True] * 12
    assert fake.most_running[2:] == [1] * 12
    again = {(link.src, link.dst): link.bytes_per_s for link in facts.links}
    assert all(again[pair] == pytest.approx(fake.pair_rate * (1.5 if pair in first_round else 1)) for pair in again)


def test_links_just_within_the_cpu_share_stay_together(monkeypatch):
    fake = Transfers(together=2, loopback_rate=4e9, pair_rate=CPU_SHARE * 4e9 / 2 * 0.99)
    use_probes(monkeypatch, fake)
    spec = measured_spec(4)
    addresses = [n.address for n in spec.nodes]
    network_facts(spec, FakeRemote(addresses, same_machine(addresses)))
    assert set(fake.times.values()) == {1}


def test_clusters_of_up_to_four_nodes_measure_every_pair_and_larger_ones_rings():
    assert [measures_every_pair(n) for n in range(1, 9)] == [True] * 4 + [False] * 4
    assert len(pair_rounds([str(i) for i in range(4)])) == FULL_ROUNDS
    assert not measures_every_pair(64)


def ring_pairs(addresses, *shifts):
    return {pair for shift in shifts for pairs in ring_rounds(addresses, shift) for pair in pairs}


@pytest.mark.parametrize("n", [5, 8])
def test_alike_nodes_measure_two_rings_their_rounds_together_and_assume_the_rest(monkeypatch, n):
    """8 nodes: rings +1 and +2, 4 rounds of 4 transfers at once (a barrier of 4); 5 nodes: 6
    rounds, each ring's first two of 2 transfers at once (a barrier of 2) and its closing transfer
    alone; every other ordered pair assumed with the measured figures, and said."""
    spec = measured_spec(n)
    addresses = [node.address for node in spec.nodes]
    alone = frozenset(pair for shift in (1, 2) for pairs in ring_rounds(addresses, shift) if len(pairs) == 1
                      for pair in pairs)
    assert len(alone) == (2 if n == 5 else 0)
    fake = Transfers(together=n // 2, loopback_rate=4e9, pair_rate=12.5e6, alone=alone)
    use_probes(monkeypatch, fake)
    lines = []
    facts = network_facts(spec, FakeRemote(addresses), lines.append)
    assert fake.clashes == [] and set(fake.times) == ring_pairs(addresses, 1, 2) and set(fake.times.values()) == {1}
    assert fake.most == n // 2
    assert [(link.src, link.dst) for link in facts.links] == list(itertools.permutations(addresses, 2))
    sources = Counter(link.source for link in facts.links)
    assert sources == Counter({"measured": 2 * n, "assumed": n * (n - 1) - 2 * n})
    assert {(link.bytes_per_s, link.latency_s) for link in facts.links} == {(12.5e6, 5e-5)}
    assert lines == [status(2 * n, n * (n - 1), 2, 4 if n == 8 else 6)]


def test_shared_cpus_measure_both_rings_one_transfer_at_a_time_after_a_round_over_the_share(monkeypatch):
    """6 nodes on one machine's CPUs, links whose rates add up to more than CPU_SHARE of its
    loopback: ring +1's first round (3 transfers) together, then again alone; every later transfer
    (ring +2's included: the decision holds across rings) alone on the main thread."""
    fake = Transfers(together=3, loopback_rate=4e9, pair_rate=CPU_SHARE * 4e9 / 3 * 1.01, barrier=False)
    use_probes(monkeypatch, fake)
    spec = measured_spec(6)
    addresses = [n.address for n in spec.nodes]
    first_round = ring_rounds(addresses, 1)[0]
    lines = []
    facts = network_facts(spec, FakeRemote(addresses, same_machine(addresses)), lines.append)
    assert fake.clashes == []
    assert fake.times == Counter({pair: 2 if pair in first_round else 1 for pair in ring_pairs(addresses, 1, 2)})
    assert fake.on_main == [False] * 3 + [True] * 12
    assert fake.most_running[3:] == [1] * 12
    # 5 rounds (ring +1: 2, ring +2 on 6 nodes: 3), the first counted once; the first round's pairs
    # read 1.5 x on their second measurement, so the rates differ
    assert lines == [status(12, 30, 2, 5, DIFFER)]
    assert Counter(link.source for link in facts.links) == Counter({"measured": 12, "assumed": 18})



def status(measured: int, pairs: int, rings: int, rounds: int, how: str = "alike") -> str:
    """The line network_facts says on a cluster measured by rings."""
    return (f"network: {measured} of {pairs} ordered pairs of nodes measured ({rings} rings, {rounds} rounds); the "
            f"other {pairs - measured} assumed {how}: each as the slower of its sender's fastest measured send and "
            "its receiver's fastest measured receive, the latency the sum of its two nodes' least less the least of "
            "all (source 'assumed' in the facts)")


DIFFER = "by the rule (the measured rates differ)"


def ports(port_mbit, asked):
    """A fake measure_transfer on a switched network: a pair's rate the slower of its two hosts'
    ports (100 Mbit/s unless `port_mbit` says); each pair asked appended to `asked`."""

    def measure(sender, receiver, host, nbytes, *, pings, max_s, shape):
        asked.append((sender.node.address, receiver.node.address))
        mbit = min(port_mbit.get(sender.node.address, 100), port_mbit.get(receiver.node.address, 100))
        return Transfer(nbytes=int(mbit * 1e6 / 8), seconds=1.0, rtt_s=[2e-4])

    return measure


@pytest.mark.parametrize("port_mbit", [{"10.0.0.4": 50}, {f"10.0.0.{k}": 1000 for k in range(1, 9, 2)}],
                         ids=["one-slow-host", "alternating-ports"])
def test_hosts_of_different_ports_among_eight_are_found_by_two_rings(monkeypatch, port_mbit):
    """One host at 50 Mbit/s among 100; or ports alternating 1000 and 100 Mbit/s, where every link
    of ring +1 touches a slow host and reads 100 (one ring would assume 12 fast pairs slow): rings
    +1 and +2 get every pair right, the rates differ, and the line says the rule assumed them."""
    asked = []
    use_probes(monkeypatch, ports(port_mbit, asked))
    spec = measured_spec(8)
    addresses = [node.address for node in spec.nodes]
    lines = []
    facts = network_facts(spec, FakeRemote(addresses), lines.append)
    assert sorted(asked[1:]) == sorted(ring_pairs(addresses, 1, 2))
    assert lines == [status(16, 56, 2, 4, DIFFER)]
    assert {(link.src, link.dst): link.bytes_per_s * 8 / 1e6 for link in facts.links} == {
        (a, b): min(port_mbit.get(a, 100), port_mbit.get(b, 100)) for a, b in itertools.permutations(addresses, 2)}


def test_a_network_the_rule_cannot_explain_is_measured_in_three_rings_and_said(monkeypatch):
    """Two racks interleaved (odd and even addresses) whose paths between them run at 30 Mbit/s,
    100 inside: ring +1 crosses, ring +2 stays inside, so the rule, from every node's fast send and
    receive, assumes the crossing links fast; the ring the other way crosses too."""
    asked = []

    def measure(sender, receiver, host, nbytes, **kwargs):
        asked.append((sender.node.address, receiver.node.address))
        same = int(sender.node.address[-1]) % 2 == int(receiver.node.address[-1]) % 2
        return Transfer(nbytes=int((100 if same else 30) * 1e6 / 8), seconds=1.0, rtt_s=[2e-4])

    use_probes(monkeypatch, measure)
    spec = measured_spec(6)
    addresses = [node.address for node in spec.nodes]
    lines = []
    facts = network_facts(spec, FakeRemote(addresses), lines.append)
    assert sorted(asked[1:]) == sorted(ring_pairs(addresses, *RING_SHIFTS))
    assert [line.split(" (")[0] for line in lines] == [
        "network: 2 rings' rates disagree with the rule by more than 20%",
        "network: 3 rings' rates disagree with the rule by more than 20%",
        "network: 18 of 30 ordered pairs of nodes measured"]
    assert lines[0].endswith("measuring another ring (node i to node i-1)")
    assert lines[1].endswith("the assumed pairs may be off: measure again (`--measure-network`) or give the figures "
                             "in the cluster spec's `network` field")
    assert lines[2] == status(18, 30, 3, 7, DIFFER)
    assert Counter(link.source for link in facts.links) == Counter({"measured": 18, "assumed": 12})


def test_a_pair_whose_shaper_could_not_be_measured_is_reported_by_name(transfers, monkeypatch):
    """A failed shape stage (here on 10.0.0.2 -> 10.0.0.1) keeps the pair's bandwidth and latency,
    and is said, so that its 0 bucket and queue are not read as a path without a shaper."""
    measure = network_facts_module.StandingProbes.measure

    def failing_shape(sender, receiver, host, nbytes, **kwargs):
        done = measure(sender, receiver, host, nbytes, **kwargs)
        if (sender.node.address, host) == ("10.0.0.2", "10.0.0.1"):
            return replace(done, blast=None, shape_error="TimeoutError: no answer to the UDP hello")
        return done

    use_probes(monkeypatch, failing_shape)
    spec = measured_spec(2)
    lines = []
    facts = network_facts(spec, FakeRemote([n.address for n in spec.nodes]), lines.append)
    assert lines == ["network 10.0.0.2 -> 10.0.0.1: token bucket and queue not measured (taken as none): "
                     "TimeoutError: no answer to the UDP hello"]
    back = facts.link("10.0.0.2", "10.0.0.1")
    assert (back.bytes_per_s, back.queue_bytes, back.burst_bytes) == (3e6, 0, 0)
    assert facts.link("10.0.0.1", "10.0.0.2").queue_bytes > 0


def same_machine(addresses, cpus=(6,)):
    """Every node on one machine (one boot id); node i its CPU count cpus[i % len(cpus)]."""
    return {a: ("0b1d-same", cpus[i % len(cpus)]) for i, a in enumerate(addresses)}


def test_nodes_of_one_machine_share_its_cpus(transfers):
    spec = measured_spec(3)
    addresses = [n.address for n in spec.nodes]
    facts = network_facts(spec, FakeRemote(addresses, same_machine(addresses, cpus=(6, 8, 6))))
    assert facts.shared_cpus == 8  # the most any node may use


@pytest.mark.parametrize("machines", [
    {"10.0.0.3": ("another-boot", 6)},  # one node on another machine
    {"10.0.0.2": None},  # a node whose probe cannot tell (no /proc/sys/kernel/random/boot_id)
], ids=["other-machine", "cannot-tell"])
def test_nodes_not_all_on_one_machine_are_separate_machines(transfers, machines):
    spec = measured_spec(3)
    addresses = [n.address for n in spec.nodes]
    facts = network_facts(spec, FakeRemote(addresses, {**same_machine(addresses), **machines}))
    assert facts.shared_cpus is None


def test_a_one_node_cluster_shares_no_cpus_between_hosts(transfers):
    spec = measured_spec(1)
    facts = network_facts(spec, FakeRemote(["10.0.0.1"], same_machine(["10.0.0.1"])))
    assert facts.shared_cpus is None
    assert transfers == [("10.0.0.1", "10.0.0.1", "127.0.0.1", False)]
    assert transfers.probes.made == [(["10.0.0.1"], "10.0.0.1")]


def test_a_failed_transfer_is_one_message_naming_its_path_and_the_probes_are_left(transfers, monkeypatch):
    def refused(sender, receiver, host, nbytes, **kwargs):
        if (sender.node.address, receiver.node.address) == ("10.0.0.2", "10.0.0.1"):
            raise TransferError("ConnectionRefusedError: [Errno 111] Connection refused")
        return Transfer(nbytes=1_000_000, seconds=1.0, rtt_s=[1e-4])

    probes = use_probes(monkeypatch, refused)
    spec = measured_spec(2)
    with pytest.raises(UserError) as failed:
        network_facts(spec, FakeRemote([n.address for n in spec.nodes]))
    assert str(failed.value) == (
        "cannot measure the network (10.0.0.2 -> 10.0.0.1): ConnectionRefusedError: [Errno 111] Connection refused; "
        "run `adrun cluster check`, or give the figures in the cluster spec's `network` field")
    assert probes.left == 1


def test_probes_that_did_not_start_are_one_message(monkeypatch):
    def start(endpoints, *, spare=None):
        raise TransferError("the probe did not start on 10.0.0.2 (ended: sh: 1: /opt/py: not found)")

    monkeypatch.setattr(network_facts_module, "StandingProbes", start)
    spec = measured_spec(2)
    with pytest.raises(UserError) as failed:
        network_facts(spec, FakeRemote([n.address for n in spec.nodes]))
    assert str(failed.value) == (
        "cannot measure the network: the probe did not start on 10.0.0.2 (ended: sh: 1: /opt/py: not found); "
        "run `adrun cluster check`, or give the figures in the cluster spec's `network` field")


def test_given_figures_start_no_probe(tmp_path):
    """The autouse fixture's StandingProbes fails the test when made."""
    spec = load_spec(write(tmp_path, "  bandwidth_mbit: 100\n  latency_ms: 0.5"))
    assert network_facts(spec, FakeRemote([n.address for n in spec.nodes])).shared_cpus is None
