"""TF2 scripts across two SSH namespace hosts: both oracles hold as on one machine.

Worker 0 runs on host 1 and worker 1 on host 2, each through its host's sshd, with the job's
nftables fence up on both hosts (only the job's nodes reach its TF ports; no "left open" warning):
the collectives' group forms across the hosts, every worker ends where the plain run ends (the same
data, worker 1 seeded differently) and where the mean-gradient reference ends (each worker on its
rows; tests/support/tf2_oracle.py), bit-identical to the other, and `adrun_fit` asserts that nothing of the
job is left on any host. Every script kind of tests/scripts/tf2_model.py runs under `-m full`;
TF_USE_LEGACY_KERAS reaches the hosts through `ssh.forward_env`, as a tf_keras user passes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster.netns import NetnsCluster, two_host_spec
from tests.support.tf2_oracle import (
    KINDS, TOLERANCE, adrun_fit, averaging_tolerance, equivalence, max_difference, plain, weights,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

RecordProperty = Callable[[str, object], None]  # pytest's record_property fixture
DEFAULT_KIND = "fit-sequential"  # Keras 3 fit, dense gradients all-reduced: in the default suite
FULL = pytest.mark.full


def _spec(tmp_path: Path, cluster: NetnsCluster) -> Path:
    return two_host_spec(tmp_path / "cluster.yml", cluster, ps=(0, 0), forward_env=("TF_USE_LEGACY_KERAS",))


@pytest.mark.parametrize("kind", [k if k == DEFAULT_KIND else pytest.param(k, marks=FULL) for k in KINDS])
def test_averaging_across_hosts(netns_cluster: NetnsCluster, tmp_path: Path, kind: str,
                                record_property: RecordProperty) -> None:
    expected = weights(plain(kind, tmp_path / "ref", "--data", "per-worker", "--reference", "2") / "reference.npz")
    result, out = adrun_fit(tmp_path, kind, 2, "--data", "per-worker", spec=_spec(tmp_path, netns_cluster))
    assert "accept connections from any host" not in result.output  # the fence held on both hosts
    found = [weights(out / f"w{w}.npz") for w in range(2)]
    off = max(max_difference(f, expected) for f in found)
    record_property("max_difference", off)  # the figure of the goal, in --junitxml's report
    assert off <= averaging_tolerance(kind)
    assert max_difference(found[1], found[0]) == 0.0  # every worker applies the same mean


@FULL
@pytest.mark.parametrize("kind", KINDS)
def test_equivalence_across_hosts(netns_cluster: NetnsCluster, tmp_path: Path, kind: str,
                                  record_property: RecordProperty) -> None:
    """Worker 1 on host 2 starts from worker 0's initial values, broadcast across the hosts."""
    off = equivalence(tmp_path, kind, spec=_spec(tmp_path, netns_cluster))
    record_property("max_difference", off)
    assert off <= TOLERANCE
