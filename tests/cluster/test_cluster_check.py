"""`cluster check` against real separate hosts: network namespaces, each with its own sshd.

Each fault test checks a spec of the faulty host plus one healthy host, so a result landing on
the wrong node or the wrong check fails the test, and the healthy host proves the fault did not
spread. Faults are undone in `finally`, since the cluster is shared by the whole module.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from adrun.launch.check.cluster_check import run_checks
from adrun.launch.check.report import CHECKS, CheckReport
from adrun.spec import ClusterSpec

from tests.cluster.netns import NetnsCluster, NetnsHost

# Every test shares one 3-host cluster (module scope).
pytestmark = [pytest.mark.cluster, pytest.mark.parametrize("netns_cluster", [3], indirect=True)]
SCRIPT = "tests/scripts/oracle_model.py"
BASE_PORT = 23400


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    """The script path is relative, as a user types it; the nodes share this directory."""
    monkeypatch.chdir(Path(__file__).resolve().parents[2])


def make_spec(cluster: NetnsCluster, hosts: list[NetnsHost], **per_host: dict) -> ClusterSpec:
    """A spec over `hosts`; `per_host["h2"]` overrides fields of host 2 (ssh fields merge)."""
    nodes = []
    for host in hosts:
        fields = dict(per_host.get(f"h{host.index}", {}))
        ssh = {"user": "root", "identity_file": str(cluster.client_key), **fields.pop("ssh", {})}
        nodes.append({"address": host.address, "chief": host is hosts[0], "workers": 1,
                      "ps": 1 if host is hosts[0] else 0, "base_port": BASE_PORT, "ssh": ssh, **fields})
    return ClusterSpec(version=1, nodes=nodes)


def check(spec: ClusterSpec, *, known_hosts: Path) -> CheckReport:
    return run_checks(spec, SCRIPT, known_hosts=known_hosts)


def statuses(report: CheckReport, host: NetnsHost) -> dict[str, str]:
    node = next(n for n in report.nodes if n.address == host.address)
    return {name: result.status for name, result in node.results.items()}


def result(report: CheckReport, host: NetnsHost, check: str):
    return next(n for n in report.nodes if n.address == host.address).results[check]


def assert_healthy(report: CheckReport, host: NetnsHost, *, bandwidth: bool = True) -> None:
    expected = {name: "pass" for name in CHECKS}
    if not bandwidth:
        expected["bandwidth"] = "skip"
    assert statuses(report, host) == expected


def assert_only_failure(report: CheckReport, host: NetnsHost, check: str) -> None:
    """`check` failed on `host`, and no other check on any node failed."""
    failures = [(n.address, name) for n in report.nodes for name, r in n.results.items() if r.status == "fail"]
    assert failures == [(host.address, check)]
    assert report.exit_code == 1 and not report.ok


def test_healthy_cluster_passes_every_check(netns_cluster: NetnsCluster) -> None:
    c = netns_cluster
    report = check(make_spec(c, c.hosts), known_hosts=c.known_hosts)
    for host in c.hosts:
        assert_healthy(report, host)
    assert report.ok and report.exit_code == 0
    assert {(p.source, p.target) for p in report.pairs} == {
        (a.address, b.address) for i, a in enumerate(c.hosts) for b in c.hosts[i + 1:]}
    assert all(p.mbit_s and p.mbit_s > 10 for p in report.pairs)


def test_bandwidth_follows_link_shaping(netns_cluster: NetnsCluster) -> None:
    c = netns_cluster
    h1, h2, h3 = c.hosts
    c.shape(h3, 40)
    try:
        report = check(make_spec(c, c.hosts), known_hosts=c.known_hosts)
    finally:
        c.unshape(h3)
    speed = {(p.source, p.target): p.mbit_s for p in report.pairs}
    assert 20 < speed[h1.address, h3.address] < 45 and 20 < speed[h2.address, h3.address] < 45
    assert speed[h1.address, h2.address] > 200
    assert result(report, h1, "bandwidth").detail == f"{speed[h1.address, h3.address]:.0f} Mbit/s"  # slowest link
    assert report.ok


def test_stopped_sshd(netns_cluster: NetnsCluster) -> None:
    c = netns_cluster
    h1, h2 = c.hosts[0], c.hosts[1]
    c.stop_sshd(h2)
    try:
        report = check(make_spec(c, [h1, h2]), known_hosts=c.known_hosts)
    finally:
        c.start_sshd(h2)
        c.wait_sshd(h2)
    assert_only_failure(report, h2, "ssh")
    assert "connection refused" in result(report, h2, "ssh").detail
    assert "start sshd" in result(report, h2, "ssh").remedy
    assert set(statuses(report, h2).values()) == {"fail", "skip"}
    assert result(report, h1, "python").status == "pass"


def test_wrong_key(netns_cluster: NetnsCluster, tmp_path: Path) -> None:
    c = netns_cluster
    h1, h3 = c.hosts[0], c.hosts[2]
    other_key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True, timeout=30)
    report = check(make_spec(c, [h1, h3], h3={"ssh": {"identity_file": str(other_key)}}),
                        known_hosts=c.known_hosts)
    assert_only_failure(report, h3, "ssh")
    assert f"refused {other_key} for root" in result(report, h3, "ssh").detail
    assert result(report, h3, "host_key").status == "pass"  # checked before authentication
    # The refused connection is closed, not left to the garbage collector: its session ends.
    sshd = psutil.Process(h3.sshd.pid)
    deadline = time.monotonic() + 5
    while sshd.children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sshd.children() == []


@pytest.mark.filterwarnings("ignore:Unknown ssh-ed25519 host key")  # paramiko's notice under policy "off"
def test_unknown_host_key_with_strict_policy(netns_cluster: NetnsCluster, tmp_path: Path) -> None:
    c = netns_cluster
    h1, h2 = c.hosts[0], c.hosts[1]
    known = tmp_path / "known_hosts"
    known.write_text("".join(line + "\n" for line in c.known_hosts.read_text().splitlines()
                             if not line.startswith(h2.address + " ")))
    report = check(make_spec(c, [h1, h2]), known_hosts=known)
    assert_only_failure(report, h2, "host_key")
    assert f"host key of {h2.address}:22 is not in {known}" == result(report, h2, "host_key").detail
    assert result(report, h2, "ssh").status == "pass"

    # accept-new lets the same unknown host in; a key that changed is still refused.
    report = check(make_spec(c, [h1, h2], h2={"ssh": {"host_key_policy": "accept-new"}}), known_hosts=known)
    assert_healthy(report, h2)
    assert result(report, h2, "host_key").detail == "not verified (accept-new)"
    h1_key = c.known_hosts.read_text().splitlines()[0].split(" ", 1)[1]
    known.write_text(known.read_text() + f"{h2.address} {h1_key}\n")
    report = check(make_spec(c, [h1, h2], h2={"ssh": {"host_key_policy": "accept-new"}}), known_hosts=known)
    assert_only_failure(report, h2, "host_key")
    assert "differs" in result(report, h2, "host_key").detail
    report = check(make_spec(c, [h1, h2], h2={"ssh": {"host_key_policy": "off"}}), known_hosts=known)
    assert_healthy(report, h2)
    assert result(report, h2, "host_key").detail == "not verified (off)"


def test_missing_python(netns_cluster: NetnsCluster) -> None:
    c = netns_cluster
    h1, h3 = c.hosts[0], c.hosts[2]
    report = check(make_spec(c, [h1, h3], h3={"python": "/nonexistent/bin/python3"}), known_hosts=c.known_hosts)
    assert_only_failure(report, h3, "python")
    assert "/nonexistent/bin/python3 not found" in result(report, h3, "python").detail
    assert result(report, h3, "clock").status == "pass"  # reachable, only the interpreter is missing
    assert_healthy(report, h1, bandwidth=False)


def test_different_tensorflow_version(netns_cluster: NetnsCluster, tmp_path: Path) -> None:
    c = netns_cluster
    h1, h2 = c.hosts[0], c.hosts[1]
    fake = tmp_path / "fake-tf"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text('__version__ = "2.20.0"\n')
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={fake} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    report = check(make_spec(c, [h1, h2], h2={"python": str(wrapper)}), known_hosts=c.known_hosts)
    assert_only_failure(report, h2, "versions")
    here = importlib.metadata.version("tensorflow")
    assert result(report, h2, "versions").detail == f"tf {here} here, 2.20.0 on {h2.address}"
    assert f"pip install tensorflow=={here}" in result(report, h2, "versions").remedy


def test_port_taken(netns_cluster: NetnsCluster) -> None:
    c = netns_cluster
    h1, h2 = c.hosts[0], c.hosts[1]
    listener = subprocess.Popen(
        h1.exec_argv(sys.executable, "-c", "import socket,sys,time; s=socket.socket(); "
                     f"s.bind(('', {BASE_PORT + 1})); s.listen(); print('ready', flush=True); time.sleep(120)"),
        stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "ready"
        report = check(make_spec(c, [h1, h2]), known_hosts=c.known_hosts)
    finally:
        listener.kill()
        listener.wait(timeout=10)
    assert_only_failure(report, h1, "ports")
    assert result(report, h1, "ports").detail == f"port {BASE_PORT + 1} in use on {h1.address}"
    assert result(report, h2, "ports").status == "pass"  # the same port on another host is free
