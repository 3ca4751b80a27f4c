"""The rounds the network facts measure node pairs in: every ordered pair once, no node in two
transfers of one round, and no more rounds than the bound."""

from __future__ import annotations

import itertools

import pytest

from adrun.launch.nodes.pair_schedule import matchings, pair_rounds


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

