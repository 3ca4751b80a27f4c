"""Nobody outside a job can reach its TensorFlow servers (docs/security.md), seen from another host.

The outsider is a namespace host of the cluster that is not a node of the job: on the embedded
default (the launcher's own machine, the root namespace, reached through the bridge) and on a
2-node job (hosts 1 and 2, outsider host 3). While the job trains, held after its first step by
the oracle script (`--hold`), the outsider's TCP connections to a worker's and a PS's port are
refused, and so is a TF Session run pinned to the PS (the issue's attack), while a port outside
the job stays reachable from the same outsider (so the refusal is the job's rule, not a
missing route). The job then ends and equals its oracle, and no process or nftables table of
it is left, also after `kill -9` of the launcher.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from adrun.launch.nodes.fence import nft_path, table_name
from tests.cluster.netns import NetnsCluster, NetnsHost, two_host_spec
from tests.support.live_jobs import GUARD_S, LiveAdrun, wait_no_leftovers
from tests.support.oracle import assert_matches_reference

pytestmark = [pytest.mark.cluster, pytest.mark.parametrize("netns_cluster", [3], indirect=True),
              pytest.mark.skipif(nft_path() is None, reason="nft not found: run tests/cluster/install-deps.sh")]
STEPS = 3
ORACLE = ["tests/scripts/oracle_model.py", "--model", "dense", "--data", "per-worker", "--steps", str(STEPS)]
TF_ATTACK = """\
import sys
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    read = tf.io.read_file("/proc/self/cmdline")
try:
    with tf1.Session("grpc://" + sys.argv[1], config=tf1.ConfigProto(operation_timeout_in_ms=10000)) as sess:
        print("RAN", sess.run(read))
except tf.errors.OpError as e:
    print("REFUSED", type(e).__name__)
"""


def task_addresses(job: LiveAdrun) -> dict[str, tuple[str, int]]:
    """Each task's `host:port` from the job's first line (`job ID: w0 localhost:1234, ...`)."""
    line = job.wait_for_line(rf"^adrun: job {job.job_id}: ")
    found = re.findall(r"(\w+)(?:@\S+)? (\S+):(\d+)", line.split(": ", 2)[2])
    return {tag: (host, int(port)) for tag, host, port in found}


def connects_from(host: NetnsHost, address: str, port: int) -> bool:
    """Whether a TCP connection from `host` to address:port is accepted (bounded by a 5 s timeout)."""
    code = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
            "    print('OPEN')\nexcept OSError as e:\n    print('CLOSED', e)\n")
    out = subprocess.run(host.exec_argv(sys.executable, "-c", code, address, str(port)), capture_output=True,
                         text=True, timeout=30).stdout
    assert out.startswith(("OPEN", "CLOSED")), out
    return out.startswith("OPEN")


def tf_session_from(host: NetnsHost, address: str, port: int) -> str:
    """What a TF Session of `host` gets when it runs an op pinned to /job:ps/task:0 at address:port."""
    done = subprocess.run(host.exec_argv(sys.executable, "-c", TF_ATTACK, f"{address}:{port}"), capture_output=True,
                          text=True, timeout=180, cwd="/")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]


def job_tables(job_id: str, netns: str | None = None) -> list[str]:
    """The names of job `job_id`'s nftables tables (any attempt's) in the root namespace, or in
    `netns`. Only the job's own: other tests' jobs (another xdist worker's) hold tables of their
    own in the root namespace meanwhile."""
    argv = ["nft", "list", "tables"]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
    prefix = table_name(job_id, 0).removesuffix("0")  # adrun_<job>_a
    return [line.split()[-1] for line in out.splitlines() if line.split() and line.split()[-1].startswith(prefix)]


def wait_for_no_tables(job: LiveAdrun, netns: list[str | None]) -> None:
    """Every namespace in `netns` (None: the root one) without a table of the job (bounded wait)."""
    deadline = time.monotonic() + GUARD_S
    while any(job_tables(job.job_id, ns) for ns in netns):
        assert time.monotonic() < deadline, [job_tables(job.job_id, ns) for ns in netns]
        time.sleep(0.1)


class Listener:
    """A TCP port of this namespace outside any job: the outsider reaching it proves the route."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


def test_the_embedded_default_refuses_other_hosts(netns_cluster: NetnsCluster, live, tmp_path: Path) -> None:
    c, outsider = netns_cluster, netns_cluster.hosts[2]
    out, release = tmp_path / "out", tmp_path / "release"
    job = live("--strategy", "PS", *ORACLE, "--out", str(out), "--hold", str(release))
    tasks = task_addresses(job)
    job.wait_for_line(r"^\[w0\] holding$")  # trained a step: every server of the job listens
    control = Listener()
    try:
        assert connects_from(outsider, c.gateway, control.port)  # this machine is reachable from the outsider ...
        for tag in ("w0", "w1", "ps0"):
            assert not connects_from(outsider, c.gateway, tasks[tag][1]), tag  # ... but not the job's ports
    finally:
        control.close()
    # gRPC retries a refused connection until the op's deadline: either error means nothing ran
    assert tf_session_from(outsider, c.gateway, tasks["ps0"][1]) in ("REFUSED UnavailableError",
                                                                     "REFUSED DeadlineExceededError")
    assert job_tables(job.job_id) == [table_name(job.job_id, 0)]
    release.touch()
    assert job.wait(timeout_s=GUARD_S) == 0, job.output
    assert "accept connections from any host" not in job.output  # nothing was left open
    assert_matches_reference(out, ORACLE, 2, STEPS, "embedded default, outsider refused")
    assert leftover_processes(job.job_id) == []
    wait_for_no_tables(job, [None])


def test_a_multi_node_job_accepts_only_its_own_nodes(netns_cluster: NetnsCluster, live, tmp_path: Path) -> None:
    c = netns_cluster
    h1, h2, outsider = c.hosts
    out, release = tmp_path / "out", tmp_path / "release"
    spec = two_host_spec(tmp_path / "cluster.yml", c)  # w0 + ps0 on host 1, w1 on host 2
    job = live("--spec", str(spec), "--strategy", "PS", *ORACLE, "--out", str(out), "--hold", str(release))
    tasks = task_addresses(job)
    job.wait_for_line(rf"^\[w0@{h1.address}\] holding$")  # w1 on host 2 reached ps0 on host 1 to get here
    assert connects_from(outsider, h1.address, 22) and connects_from(outsider, h2.address, 22)  # routes exist
    for tag in ("w0", "ps0", "w1"):
        address, port = tasks[tag]
        assert not connects_from(outsider, address, port), tag
    assert connects_from(h2, h1.address, tasks["ps0"][1])  # a node of the job gets in
    # the launcher's machine is no node of this job: refused as well
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((h1.address, tasks["ps0"][1]), timeout=5).close()
    release.touch()
    assert job.wait(timeout_s=GUARD_S) == 0, job.output
    assert_matches_reference(out, ORACLE, 2, STEPS, "2 nodes, outsider refused")
    assert leftover_processes(job.job_id) == []
    wait_for_no_tables(job, [h1.netns, h2.netns])


@pytest.mark.full
def test_a_job_with_this_machine_as_a_node_accepts_only_its_own_nodes(netns_cluster: NetnsCluster, live,
                                                                      tmp_path: Path) -> None:
    """This machine (w0 + ps0, at its bridge address) and host 1 (w1): each lets in the other only."""
    c = netns_cluster
    h1, outsider = c.hosts[0], c.hosts[2]
    out, release = tmp_path / "out", tmp_path / "release"
    spec = tmp_path / "cluster.yml"
    spec.write_text("\n".join([
        "version: 1", "nodes:",
        f"  - address: {c.gateway}", "    chief: true", "    workers: 1", "    ps: 1",
        f"  - address: {h1.address}", "    workers: 1", "    ps: 0", "    ssh:", "      user: root",
        f"      identity_file: {c.client_key}", f"      known_hosts: {c.known_hosts}", ""]))
    job = live("--spec", str(spec), "--strategy", "PS", *ORACLE, "--out", str(out), "--hold", str(release))
    tasks = task_addresses(job)
    job.wait_for_line(r"^\[w0\] holding$")
    for tag in ("w0", "ps0", "w1"):
        address, port = tasks[tag]
        assert not connects_from(outsider, address, port), tag
    assert connects_from(h1, c.gateway, tasks["ps0"][1])  # host 1's tasks reach this machine's PS
    release.touch()
    assert job.wait(timeout_s=GUARD_S) == 0, job.output
    assert_matches_reference(out, ORACLE, 2, STEPS, "this machine + 1 node, outsider refused")
    assert leftover_processes(job.job_id) == []
    wait_for_no_tables(job, [None, h1.netns])


@pytest.mark.parametrize("nodes", ["embedded", pytest.param("multi-node", marks=pytest.mark.full)])
def test_nothing_is_left_after_the_launcher_is_killed(netns_cluster: NetnsCluster, live, tmp_path: Path,
                                                      nodes: str) -> None:
    c = netns_cluster
    release = tmp_path / "release"
    spec = ["--spec", str(two_host_spec(tmp_path / "cluster.yml", c))] if nodes == "multi-node" else []
    job = live(*spec, "--strategy", "PS", *ORACLE, "--out", str(tmp_path / "out"), "--hold", str(release))
    job.wait_for_line(r"^\[w0(@\S+)?\] holding$")
    namespaces = [c.hosts[0].netns, c.hosts[1].netns] if spec else [None]
    assert all(job_tables(job.job_id, ns) == [table_name(job.job_id, 0)] for ns in namespaces)
    job.proc.kill()  # SIGKILL: no teardown code of the launcher runs
    job.proc.wait(timeout=GUARD_S)
    wait_no_leftovers(job.job_id, GUARD_S)
    wait_for_no_tables(job, namespaces)


@pytest.mark.full
def test_without_the_rule_the_outsider_runs_code_on_the_ps(netns_cluster: NetnsCluster, live, tmp_path: Path) -> None:
    """The issue's attack, as a control for the tests above: with --allow-exposed the outsider's
    Session runs an op on the job's PS and reads its command line."""
    c, outsider = netns_cluster, netns_cluster.hosts[2]
    release = tmp_path / "release"
    job = live("--allow-exposed", "--strategy", "PS", *ORACLE, "--out", str(tmp_path / "out"), "--hold", str(release))
    tasks = task_addresses(job)
    job.wait_for_line(r"^\[w0\] holding$")
    assert job_tables(job.job_id) == []
    answer = tf_session_from(outsider, c.gateway, tasks["ps0"][1])
    assert answer.startswith("RAN") and "adrun.runtime.ps_server" in answer, answer
    release.touch()
    assert job.wait(timeout_s=GUARD_S) == 0, job.output
