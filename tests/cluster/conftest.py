"""Fixtures for tests that need several hosts: a network-namespace cluster per test module.

Use `netns_cluster` directly for 2 hosts, or choose the count with indirect parametrization:

    @pytest.mark.parametrize("netns_cluster", [3], indirect=True)
    def test_x(netns_cluster): ...

The cluster is torn down by a finalizer registered before it is built, so a failing test or a
failing setup leaves no namespace, link, sshd or temp dir behind.
"""

from __future__ import annotations

import pytest

from tests.cluster.netns import NetnsCluster, missing_requirements

DEFAULT_HOSTS = 2


@pytest.fixture(scope="module")
def netns_cluster(request: pytest.FixtureRequest) -> NetnsCluster:
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    cluster = NetnsCluster(getattr(request, "param", DEFAULT_HOSTS))
    request.addfinalizer(cluster.close)
    return cluster.start()
