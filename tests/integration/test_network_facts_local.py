"""Network facts measured on this machine: its loopback, with the standing probes' transfers."""

from __future__ import annotations

import psutil
import pytest

from adrun.errors import UserError
from adrun.launch.nodes.network_facts import network_facts
from adrun.spec import ClusterSpec

pytestmark = pytest.mark.integration


def test_one_machine_cluster_measures_its_loopback():
    spec = ClusterSpec(version=1, nodes=[{"address": "localhost", "workers": 2, "ps": 1}])
    facts = network_facts(spec)
    assert facts.local.source == "measured"
    assert facts.local.bytes_per_s > 1e6  # a loopback moves far more than a megabyte per second
    assert 0 < facts.local.latency_s < 0.5
    assert facts.links == []
    assert facts.link("localhost", "localhost") == facts.local
    assert psutil.Process().children(recursive=True) == []


def test_a_probe_that_cannot_start_is_one_message_naming_the_node():
    spec = ClusterSpec(version=1, nodes=[{"address": "localhost", "python": "/nonexistent/python3"}])
    with pytest.raises(UserError) as refused:
        network_facts(spec)
    message = str(refused.value)
    assert message.startswith("cannot measure the network: the probe did not start on localhost (ended: ")
    assert message.count("localhost") == 1  # the node's probe and its spare, one message
    assert "/nonexistent/python3" in message
    assert message.endswith("run `adrun cluster check`, or give the figures in the cluster spec's `network` field")
    assert psutil.Process().children(recursive=True) == []
