"""TF2 scripts across two SSH namespace hosts: the averaging oracle holds as on one machine.

Worker 0 runs on host 1 and worker 1 on host 2, each through its host's sshd, with the job's
nftables fence up on both hosts (only the job's nodes reach its TF ports; no "left open" warning):
the collectives' group forms across the hosts, every worker ends where the mean-gradient reference
ends (tests/support/tf2_oracle.py), bit-identical to the other, and `adrun_fit` asserts that nothing of the
job is left on any host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.netns import NetnsCluster, two_host_spec
from tests.support.tf2_oracle import TOLERANCE, adrun_fit, max_difference, plain, weights

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


@pytest.mark.parametrize("kind", ["fit-sequential", pytest.param("embed-adam", marks=pytest.mark.full)])
def test_averaging_across_hosts(netns_cluster: NetnsCluster, tmp_path: Path, kind: str) -> None:
    """Keras 3 fit (dense gradients, all-reduced) and Embedding + Adam (sparse rows, all-gathered)."""
    expected = weights(plain(kind, tmp_path / "ref", "--data", "per-worker", "--reference", "2") / "reference.npz")
    spec = two_host_spec(tmp_path / "cluster.yml", netns_cluster, ps=(0, 0))
    result, out = adrun_fit(tmp_path, kind, 2, "--data", "per-worker", spec=spec)
    assert "accept connections from any host" not in result.output  # the fence held on both hosts
    found = [weights(out / f"w{w}.npz") for w in range(2)]
    assert max(max_difference(f, expected) for f in found) <= TOLERANCE
    assert max_difference(found[1], found[0]) == 0.0  # every worker applies the same mean
