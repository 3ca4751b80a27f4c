"""The rounds the network facts measure node pairs in: every ordered pair once (the full schedule)
or a ring (each node sends once and receives once), no node in two transfers of one round, and no
more rounds than the bound (a ring's: 2 or 3, whatever the count)."""

from __future__ import annotations

import itertools
import math

import pytest

from adrun.launch.nodes.pair_schedule import matchings, pair_rounds, ring_rounds


def nodes(n: int) -> list[str]:
    return [f"10.0.0.{i}" for i in range(1, n + 1)]


@pytest.mark.parametrize("n", range(1, 12))
def test_every_ordered_pair_is_measured_exactly_once(n):
    measured = [pair for pairs in pair_rounds(nodes(n)) for pair in pairs]
    assert sorted(measured) == sorted(itertools.permutations(nodes(n), 2))


@pytest.mark.parametrize("n", range(2, 12))
def test_no_node_is_in_two_transfers_of_one_round(n):
    for pairs in pair_rounds(nodes(n)):
        ends = [node for pair in pairs for node in pair]
        assert len(ends) == len(set(ends)), pairs


@pytest.mark.parametrize("n", range(2, 12))
def test_rounds_are_bounded_and_full(n):
    rounds = pair_rounds(nodes(n))
    # 2(N-1) rounds of N/2 transfers for even N (the fewest: N(N-1) transfers, N/2 a round); 2N of (N-1)/2 for odd N
    assert len(rounds) == (2 * (n - 1) if n % 2 == 0 else 2 * n)
    assert {len(pairs) for pairs in rounds} == {n // 2}


def test_a_pair_and_its_reverse_are_in_consecutive_rounds():
    """Each matching one way, then the other: a node never sends and receives in one round."""
    rounds = pair_rounds(nodes(4))
    assert rounds[:2] == [[("10.0.0.1", "10.0.0.4"), ("10.0.0.2", "10.0.0.3")],
                          [("10.0.0.4", "10.0.0.1"), ("10.0.0.3", "10.0.0.2")]]
    for there, back in zip(rounds[::2], rounds[1::2], strict=True):
        assert back == [(b, a) for a, b in there]


@pytest.mark.parametrize("n", range(2, 10))
def test_matchings_cover_every_unordered_pair_once(n):
    found = [frozenset(pair) for matching in matchings(nodes(n)) for pair in matching]
    assert sorted(map(sorted, found)) == sorted(map(sorted, itertools.combinations(nodes(n), 2)))


def test_one_node_has_no_rounds_and_a_node_listed_twice_is_refused():
    assert pair_rounds(nodes(1)) == []
    with pytest.raises(ValueError, match="nodes listed twice"):
        pair_rounds(["10.0.0.1", "10.0.0.2", "10.0.0.1"])



SHIFTS = (1, 2, -1)  # network_facts.RING_SHIFTS, the rings a large cluster may measure


@pytest.mark.parametrize("n", [*range(2, 18), 64])
@pytest.mark.parametrize("shift", SHIFTS)
def test_a_ring_has_every_node_send_once_and_receive_once(n, shift):
    if shift % n == 0:
        pytest.skip("no ring: every node would send to itself")
    rounds = ring_rounds(nodes(n), shift)
    measured = [pair for pairs in rounds for pair in pairs]
    names = nodes(n)
    assert sorted(measured) == sorted((names[i], names[(i + shift) % n]) for i in range(n))
    assert sorted(src for src, _ in measured) == sorted(names)  # every node covered, both ways
    assert sorted(dst for _, dst in measured) == sorted(names)


@pytest.mark.parametrize("n", [*range(2, 18), 64, 200])
@pytest.mark.parametrize("shift", SHIFTS)
def test_a_ring_takes_two_or_three_rounds_whatever_the_count_and_no_node_sends_and_receives_in_one(n, shift):
    if shift % n == 0:
        pytest.skip("no ring: every node would send to itself")
    rounds = ring_rounds(nodes(n), shift)
    for pairs in rounds:
        ends = [node for pair in pairs for node in pair]
        assert len(ends) == len(set(ends)), pairs
    # gcd(n, shift) cycles of n / gcd nodes: all even -> 2 rounds, odd -> 3 (the closing transfers)
    cycle = n // math.gcd(n, shift % n)
    assert len(rounds) == (2 if cycle % 2 == 0 else 3)
    if cycle % 2 == 0:
        assert [len(pairs) for pairs in rounds] == [n // 2, n // 2]


@pytest.mark.parametrize("n", range(5, 19))
def test_rings_plus_one_and_plus_two_take_four_five_or_six_rounds(n):
    """The counts network_facts.py, README.md and docs/profiling.md state: 4 for N divisible by 4,
    5 for N = 2 (mod 4) (ring +2's two cycles of odd length N/2), 6 for odd N."""
    rounds = len(ring_rounds(nodes(n), 1)) + len(ring_rounds(nodes(n), 2))
    assert rounds == (6 if n % 2 else 4 if n % 4 == 0 else 5)


def test_a_ring_of_eight_in_its_two_rounds():
    assert ring_rounds(nodes(8), 1) == [
        [("10.0.0.1", "10.0.0.2"), ("10.0.0.3", "10.0.0.4"), ("10.0.0.5", "10.0.0.6"), ("10.0.0.7", "10.0.0.8")],
        [("10.0.0.2", "10.0.0.3"), ("10.0.0.4", "10.0.0.5"), ("10.0.0.6", "10.0.0.7"), ("10.0.0.8", "10.0.0.1")],
    ]
    # odd: the transfer closing the cycle is alone in the third round
    assert ring_rounds(nodes(5), 1)[2] == [("10.0.0.5", "10.0.0.1")]


def test_a_ring_refuses_a_shift_onto_itself_and_a_node_listed_twice():
    with pytest.raises(ValueError, match="not a multiple of 4"):
        ring_rounds(nodes(4), 4)
    with pytest.raises(ValueError, match="2 nodes or more"):
        ring_rounds(nodes(1), 1)
    with pytest.raises(ValueError, match="nodes listed twice"):
        ring_rounds(["10.0.0.1", "10.0.0.2", "10.0.0.1"], 1)
