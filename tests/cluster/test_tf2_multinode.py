"""TF2 scripts across two SSH namespace hosts: the averaging oracle holds as on one machine.

Worker 0 runs on host 1 and worker 1 on host 2, each through its host's sshd, with the job's
nftables fence up on both hosts (only the job's nodes reach its TF ports): the collectives' group
forms across the hosts, every worker ends where the mean-gradient reference ends (tests/tf2_oracle.py),
bit-identical to the other, and `adrun_fit` asserts that nothing of the job is left on any host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tf2_oracle import TOLERANCE, averaging

from .netns import NetnsCluster
from .test_multinode import write_spec

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


@pytest.mark.parametrize("kind", ["fit-sequential", pytest.param("embed-adam", marks=pytest.mark.full)])
def test_averaging_across_hosts(netns_cluster: NetnsCluster, tmp_path: Path, kind: str) -> None:
    """Keras 3 fit (dense gradients, all-reduced) and Embedding + Adam (sparse rows, all-gathered)."""
    spec = write_spec(tmp_path / "cluster.yml", netns_cluster, ps=(0, 0))
    off, between = averaging(tmp_path, kind, spec=spec)
    assert off <= TOLERANCE
    assert between == 0.0
