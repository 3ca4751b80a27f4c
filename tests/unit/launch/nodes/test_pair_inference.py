"""The rule for the node pairs a sampled measurement leaves out: alike hosts get the measured
figures, a host with a slower port makes its pairs as slow, a far host its pairs as late; and which
measured rates disagree with it."""

from __future__ import annotations

import itertools

import pytest

from adrun.launch.nodes.pair_inference import Inference, assumed_links, off_the_rule, slower_than_fastest
from adrun.launch.nodes.pair_schedule import ring_rounds
from adrun.strategies.facts import HostLink

MBIT = 1e6 / 8


def nodes(n: int) -> list[str]:
    return [f"10.0.0.{i}" for i in range(1, n + 1)]


def ring(n: int, *shifts: int) -> list[tuple[str, str]]:
    return [pair for shift in shifts for pairs in ring_rounds(nodes(n), shift) for pair in pairs]


def link(src: str, dst: str, mbit: float = 100, latency_s: float = 1e-4, burst: float = 60_000,
         queue: float = 600_000) -> HostLink:
    return HostLink(src=src, dst=dst, bytes_per_s=mbit * MBIT, latency_s=latency_s, burst_bytes=burst,
                    queue_bytes=queue, source="measured")


def switched(port_mbit: dict[str, float], delay_s: dict[str, float] | None = None):
    """A path's truth on a switched network: the slower of its two hosts' ports, the sum of its two
    hosts' delays (each host's bucket and queue proportional to its rate)."""
    delay_s = delay_s or {}

    def truth(src: str, dst: str) -> HostLink:
        mbit = min(port_mbit.get(src, 100), port_mbit.get(dst, 100))
        return link(src, dst, mbit, 1e-4 + delay_s.get(src, 0) + delay_s.get(dst, 0), burst=600 * mbit,
                    queue=6000 * mbit)

    return truth


@pytest.mark.parametrize("n", [5, 6, 8, 16])
def test_alike_hosts_assume_every_pair_at_the_measured_figures(n):
    measured = [link(a, b) for a, b in ring(n, 1)]
    assumed = assumed_links(nodes(n), measured)
    assert len(assumed) == n * (n - 1) - n
    assert {(a.src, a.dst) for a in assumed} | {(m.src, m.dst) for m in measured} == set(
        itertools.permutations(nodes(n), 2))
    assert {(a.bytes_per_s, a.latency_s, a.burst_bytes, a.queue_bytes, a.source) for a in assumed} == {
        (100 * MBIT, 1e-4, 60_000, 600_000, "assumed")}


def test_a_slow_host_is_found_once_its_neighbours_were_measured_with_other_partners():
    """10.0.0.4's port at 50 Mbit/s: a first ring alone cannot tell its neighbours' ports from its
    own (10.0.0.3 sent only to it); with the ring the other way, or the ring +2 (network_facts.py's
    second), every assumed pair is right."""
    n = 8
    truth = switched({"10.0.0.4": 50})
    one = Inference([truth(a, b) for a, b in ring(n, 1)])
    assert one.link("10.0.0.3", "10.0.0.7").bytes_per_s == 50 * MBIT  # wrong: 10.0.0.3's port is fast
    for second in (-1, 2):
        measured = [truth(a, b) for a, b in ring(n, 1, second)]
        for assumed in assumed_links(nodes(n), measured):
            right = truth(assumed.src, assumed.dst)
            assert (assumed.bytes_per_s, assumed.burst_bytes, assumed.queue_bytes) == (
                right.bytes_per_s, right.burst_bytes, right.queue_bytes), (second, assumed.src, assumed.dst)


def test_a_far_host_makes_its_pairs_late_and_no_other():
    n = 6
    truth = switched({}, {"10.0.0.2": 0.005})
    assumed = {(a.src, a.dst): a for a in assumed_links(nodes(n), [truth(a, b) for a, b in ring(n, 1)])}
    assert assumed["10.0.0.2", "10.0.0.5"].latency_s == pytest.approx(0.0051)
    assert assumed["10.0.0.6", "10.0.0.2"].latency_s == pytest.approx(0.0051)
    assert assumed["10.0.0.1", "10.0.0.4"].latency_s == pytest.approx(1e-4)


def test_two_far_hosts_get_both_delays_on_their_path():
    """10.0.0.2 and 10.0.0.6 each 10 ms away, never measured together (rings +1 and +2 of 8): their
    path carries both delays (20.1 ms), not the larger (10.1); their paths to near hosts one."""
    n = 8
    truth = switched({}, {"10.0.0.2": 0.01, "10.0.0.6": 0.01})
    measured = [truth(a, b) for a, b in ring(n, 1, 2)]
    assert not {("10.0.0.2", "10.0.0.6"), ("10.0.0.6", "10.0.0.2")} & {(m.src, m.dst) for m in measured}
    for assumed in assumed_links(nodes(n), measured):
        right = truth(assumed.src, assumed.dst)
        assert assumed.latency_s == pytest.approx(right.latency_s), (assumed.src, assumed.dst)
    assert Inference(measured).link("10.0.0.2", "10.0.0.6").latency_s == pytest.approx(0.0201)


def test_an_assumed_pair_takes_the_figures_of_its_slower_end():
    """The sender's fastest send when the receiver receives faster, else the receiver's fastest receive."""
    measured = [link("a", "b", 100, burst=1, queue=10), link("b", "c", 40, burst=2, queue=20),
                link("c", "a", 40, burst=3, queue=30)]
    inference = Inference(measured)
    there = inference.link("a", "c")  # a sends at 100 at best, c receives at 40 at best
    assert (there.bytes_per_s, there.burst_bytes, there.queue_bytes) == (40 * MBIT, 2, 20)
    back = inference.link("b", "a")  # b sends at 40, a receives at 40: a tie keeps the sender's
    assert (back.bytes_per_s, back.burst_bytes, back.queue_bytes) == (40 * MBIT, 2, 20)


def test_a_node_without_a_measured_send_cannot_be_assumed_from():
    with pytest.raises(KeyError, match="no measured send from c"):
        Inference([link("a", "b"), link("b", "c")]).link("c", "a")


def test_rates_more_than_the_tolerance_below_the_fastest_differ():
    links = [link("a", "b", 100), link("b", "c", 85), link("c", "a", 79)]
    assert [(x.src, x.dst) for x in slower_than_fastest(links, 0.2)] == [("c", "a")]
    assert slower_than_fastest(links[:2], 0.2) == []


def test_a_slow_host_s_two_rings_agree_with_the_rule():
    measured = [switched({"10.0.0.4": 50})(a, b) for a, b in ring(8, 1, 2)]
    assert len(slower_than_fastest(measured, 0.2)) == 4  # into and out of 10.0.0.4, each ring
    assert off_the_rule(measured, 0.2) == []


@pytest.mark.parametrize("n", [5, 6, 7, 8, 9])
@pytest.mark.parametrize("kind", ["one-slow-host", "alternating-ports"])
def test_rings_plus_one_and_plus_two_get_every_pair_exact(n, kind):
    """One host at 50 Mbit/s among 100 (each position), or ports alternating 1000 and 100 Mbit/s
    (ring +1 alone reads 100 on every link for even N, and would assume the fast pairs slow)."""
    ports = ([{f"10.0.0.{k}": 50} for k in range(1, n + 1)] if kind == "one-slow-host" else
             [{f"10.0.0.{k}": 1000 for k in range(1, n + 1, 2)}])
    for port_mbit in ports:
        truth = switched(port_mbit)
        measured = [truth(a, b) for a, b in ring(n, 1, 2)]
        assert off_the_rule(measured, 0.2) == []
        for assumed in assumed_links(nodes(n), measured):
            right = truth(assumed.src, assumed.dst)
            assert (assumed.bytes_per_s, assumed.burst_bytes, assumed.queue_bytes) == (
                right.bytes_per_s, right.burst_bytes, right.queue_bytes), (port_mbit, assumed.src, assumed.dst)


def test_fast_hosts_whose_ring_partners_are_all_slower_stay_unseen():
    """The limit docs/profiling.md states: two 10 Gbit/s hosts four apart among 1 Gbit/s ones (8
    nodes) are never measured together nor with another fast host; their path is assumed 1000."""
    truth = switched({f"10.0.0.{k}": 10_000 if k in (2, 6) else 1000 for k in range(1, 9)})
    measured = [truth(a, b) for a, b in ring(8, 1, 2)]
    assert {m.bytes_per_s for m in measured} == {1000 * MBIT}
    assert Inference(measured).link("10.0.0.2", "10.0.0.6").bytes_per_s == 1000 * MBIT


def test_a_path_slower_than_both_its_ends_is_off_the_rule():
    """Two racks of two, whose paths between them are slow: a -> b and c -> d are fast, so every
    node has a fast send and a fast receive, and the rule assumes its slow paths fast."""
    rack = {"a": 0, "b": 0, "c": 1, "d": 1}

    def truth(src, dst):
        return link(src, dst, 100 if rack[src] == rack[dst] else 30)

    measured = [truth(x, y) for x, y in [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("b", "a"), ("d", "c")]]
    assert [(x.src, x.dst) for x in off_the_rule(measured, 0.2)] == [("b", "c"), ("d", "a")]
