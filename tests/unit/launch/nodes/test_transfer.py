"""A transfer's result as the probe's sender reports it (launch/nodes/transfer.py), with shells
that answer as the probes would: what the `shape` stage measured, or why it failed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from adrun.launch.nodes import probe
from adrun.launch.nodes.transfer import Endpoint, measure_transfer
from adrun.spec import Node


class ProbeShell:
    """A node's shell whose every command prints the probe result line `result`."""

    def __init__(self, result: dict) -> None:
        self.result = result

    def run(self, command: str, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(returncode=0, stdout=probe.MARKER + json.dumps(self.result) + "\n", stderr="")


def endpoint(address: str, result: dict) -> Endpoint:
    return Endpoint(Node(address=address, chief=address.endswith(".1")), ProbeShell(result), False)


STREAM = {"bytes": 4_000_000, "seconds": 2.0, "rtt_s": [0.01, 0.03, 0.02]}


@pytest.mark.parametrize(("shape", "error"), [
    ({"trace": [[0, 1000]], "sent": 100, "send_s": 0.1, "received": 50, "arrival_s": 0.2}, None),
    ({"shape_error": "TimeoutError: no answer to the UDP hello"}, "TimeoutError: no answer to the UDP hello"),
], ids=["measured", "failed"])
def test_the_shape_stage_is_carried_measured_or_with_why_it_failed(shape, error):
    done = measure_transfer(endpoint("10.0.0.1", {**STREAM, **shape}), endpoint("10.0.0.2", {"bytes": 4_000_000}),
                            "10.0.0.2", 1 << 26, pings=3, shape=True)
    assert (done.bytes_per_s, done.latency_s, done.shape_error) == (2e6, 0.01, error)
    assert (done.blast is None) == (error is not None)
