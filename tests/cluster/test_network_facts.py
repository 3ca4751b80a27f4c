"""Network facts measured between namespace hosts over SSH: a shaped link is measured at its rate."""

from __future__ import annotations

import os
import subprocess

import psutil
import pytest

from adrun.launch.nodes import probe
from adrun.launch.nodes.network_facts import network_facts
from adrun.launch.job.provision import RemoteNodes
from adrun.spec import load_spec

from tests.cluster.netns import NetnsCluster, two_host_spec

pytestmark = pytest.mark.cluster
RATE_MBIT = 100


def test_shaped_links_are_measured_at_their_rate_both_ways(netns_cluster: NetnsCluster, tmp_path):
    spec = load_spec(two_host_spec(tmp_path / "cluster.yml", netns_cluster))
    first, second = (host.address for host in netns_cluster.hosts[:2])
    for host in netns_cluster.hosts:
        netns_cluster.shape(host, RATE_MBIT)
    try:
        with RemoteNodes(spec) as remote:
            remote.connect()
            facts = network_facts(spec, remote)
    finally:
        for host in netns_cluster.hosts:
            netns_cluster.unshape(host)
    # the namespace hosts are one machine: its CPUs, as a process here may use them
    assert facts.shared_cpus == len(os.sched_getaffinity(0))
    assert [(link.src, link.dst, link.source) for link in facts.links] == [
        (first, second, "measured"), (second, first, "measured")]
    for link in facts.links:
        mbit = link.bytes_per_s * 8 / 1e6
        print(f"{link.src} -> {link.dst}: {mbit:.1f} Mbit/s, {link.latency_s * 1e6:.0f} us one way")
        assert abs(mbit - RATE_MBIT) <= 0.2 * RATE_MBIT
        assert 0 < link.latency_s < 0.05
    # the chief's loopback is not shaped: far above the link
    assert facts.local.source == "measured" and facts.local.bytes_per_s * 8 / 1e6 > 2 * RATE_MBIT
    assert [probes_in(host) for host in netns_cluster.hosts] == [[], []]


def probes_in(host) -> list[str]:
    """Command lines of probe processes (`python -c <probe.py> send|recv ...`) in the host's namespace."""
    pids = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True, check=True).stdout
    found = []
    for pid in pids.split():
        try:
            cmdline = psutil.Process(int(pid)).cmdline()
        except psutil.NoSuchProcess:
            continue
        if any(probe.MARKER in arg for arg in cmdline):
            found.append(" ".join(cmdline)[-80:])
    return found
