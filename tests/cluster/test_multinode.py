"""Jobs over SSH on two network-namespace hosts: results, failures, teardown, code shipping.

Every host runs its tasks through its own sshd, at its own address; the launcher runs in the
root namespace, so no node is "this machine" and every task is remote. PIDs are shared with the
root namespace (one kernel), so `leftover_processes` sees every host's processes: a scan by
ADRUN_JOB_ID that must come back empty after each job. The long jobs would run for hours, so a job
that ends, or a host whose tasks are gone, is the event a test waits for (GUARD_S is only a hang
guard); the seconds it took are printed, not asserted, on this shared machine.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.cluster.netns import two_host_spec
from tests.support.adrun_cli import flat, run_adrun
from tests.support.live_jobs import GUARD_S, LiveAdrun, job_process, wait_no_leftovers
from tests.support.oracle import train_and_compare
from tests.support.paths import REPO, TINY

pytestmark = pytest.mark.cluster
RELATIVE_TINY = "tests/scripts/tiny_model.py"


@pytest.fixture
def long_job(netns_cluster, tmp_path, live):
    """A 2-host job (w0 + ps0 on host 1, w1 on host 2) training until stopped, both workers stepping."""
    c = netns_cluster
    job = live("--strategy", "PSLoadBalancing", "--spec", str(two_host_spec(tmp_path / "cluster.yml", c)), TINY, "--steps", "100000", "--step-sleep", "0.05")
    job.wait_for_line(rf"^\[w1@{c.hosts[1].address}\] step 2$")
    job.wait_for_line(rf"^\[w0@{c.hosts[0].address}\] step 2$")
    return job


# --- results match the single-process reference exactly as on one machine -----------------------


# identical data on every worker is the same sum with equal terms: checked across hosts in -m full
@pytest.mark.parametrize("data,strategy", [
    # PS with one PS task places every variable as PSLoadBalancing does
    pytest.param("per-worker", "PS", marks=pytest.mark.full),
    *(("per-worker", strategy) for strategy in ("PSLoadBalancing", "AllReduce")),
    *(pytest.param("same", strategy, marks=pytest.mark.full) for strategy in ("PS", "PSLoadBalancing", "AllReduce")),
])
def test_oracles_across_hosts(netns_cluster, tmp_path, strategy, data):
    def spec_file(workers: int, ps: int) -> Path:
        assert workers == 2
        return two_host_spec(tmp_path / "cluster.yml", netns_cluster, ps=(1, 0) if ps == 1 else (1, 1))

    train_and_compare(tmp_path, spec_file, strategy, "dense", data)


@pytest.mark.parametrize("strategy", [pytest.param("PS", marks=pytest.mark.full), "AllReduce"])
def test_uneven_replica_counts_across_hosts(netns_cluster, tmp_path, strategy):
    """Host 1's worker splits its batch over 3 replicas (3+3+2 rows), host 2's runs one: the
    result is still data-parallel SGD over the two workers' whole batches."""
    def spec_file(workers: int, ps: int) -> Path:
        return two_host_spec(tmp_path / "cluster.yml", netns_cluster, ps=(1, 0) if ps == 1 else (1, 1), replicas=(3, 1))

    result = train_and_compare(tmp_path, spec_file, strategy, "sparse", "per-worker")
    assert "worker 0: 3 in-graph replicas" in result.output
    assert "worker 1:" not in result.output.replace("worker 1 done", "")


def test_bounded_all_reduce_run_releases_remote_workers_together(netns_cluster, tmp_path):
    """The finish barrier through each host's keeper (its RELEASE word): in its 5th step, after the
    collectives, w1 (host 2) connects to w0's server on host 1 for 3 s, which fails the run if w0
    left after its own 5th step instead of waiting for the launcher to release both."""
    result_json = tmp_path / "result.json"
    spec = two_host_spec(tmp_path / "cluster.yml", netns_cluster, ps=(0, 0))
    result = run_adrun("--spec", str(spec), "--strategy", "AllReduce", "--max-steps", "5", "--no-record",
                       "--result-json", str(result_json), TINY, "--steps", "1000", "--watch-w0-at", "5")
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    tasks = json.loads(result_json.read_text())["tasks"]
    assert {t["task"]: (t["steps"], t["exit_code"]) for t in tasks if t["role"] == "worker"} == {"w0": (5, 0), "w1": (5, 0)}


# --- failures: a clear message, and nothing of the job left on any host ---------------------------


def _assert_ends_cleanly(job: LiveAdrun, event_at: float, code: int) -> None:
    assert job.wait(timeout_s=GUARD_S) == code, job.output
    took = time.monotonic() - event_at
    assert leftover_processes(job.job_id) == [], job.output
    print(f"job ended and every host clean {took:.1f} s after the event")


def test_remote_worker_sigkill(netns_cluster, long_job):
    h2 = netns_cluster.hosts[1].address
    job_process(long_job.job_id, "worker", 1).kill()
    _assert_ends_cleanly(long_job, time.monotonic(), 137)
    text = flat(long_job.output)
    assert f"w1@{h2} (worker 1 on {h2}) was killed by SIGKILL" in text, long_job.output
    assert f"root cause: w1@{h2} failed task w1 (worker 1) host {h2} exit killed by SIGKILL (status -9)" in text


def test_remote_ps_sigkill(netns_cluster, long_job):
    h1 = netns_cluster.hosts[0].address
    job_process(long_job.job_id, "ps", 0).kill()
    _assert_ends_cleanly(long_job, time.monotonic(), 137)
    assert f"root cause: ps0@{h1} failed task ps0 (ps 0) host {h1} exit killed by SIGKILL" in flat(long_job.output)


def test_ctrl_c(long_job):
    long_job.proc.send_signal(signal.SIGINT)
    _assert_ends_cleanly(long_job, time.monotonic(), 130)
    assert "adrun: interrupted: stopping all tasks" in long_job.output


@pytest.mark.full  # the teardown is test_ctrl_c's (SIGTERM and SIGINT share the handler); this adds the record
def test_adrun_stop_from_another_process(netns_cluster, long_job):
    """`adrun stop` returns once the launcher recorded the job's end, which it writes after its
    teardown and final sweep of every host: by then nothing of the job is left anywhere."""
    stopped = run_adrun("stop", long_job.job_id)
    assert stopped.returncode == 0, stopped.output
    assert leftover_processes(long_job.job_id) == [], long_job.output
    assert long_job.wait(timeout_s=30) == 130, long_job.output
    assert "adrun: interrupted: stopping all tasks" in long_job.output
    [ended] = [job for job in json.loads(run_adrun("jobs", "--all", "--json").stdout) if job["id"] == long_job.job_id]
    assert (ended["state"], ended["exit_code"]) == ("stopped", 130)
    assert ended["nodes"] == [host.address for host in netns_cluster.hosts[:2]]


def test_killed_launcher(long_job):
    assert {p.info["environ"].get("ADRUN_ROLE") for p in leftover_processes(long_job.job_id)} >= {"worker", "ps"}
    long_job.proc.kill()
    long_job.wait(timeout_s=GUARD_S)
    took = wait_no_leftovers(long_job.job_id, GUARD_S)
    print(f"every remote task gone {took:.1f} s after SIGKILL of adrun")


def test_cut_ssh_connection(netns_cluster, long_job):
    """Killing the sshd process that serves the launcher's connection to host 2 (as a crashed
    sshd or a reset connection would) ends host 2's tasks and fails the job, naming the host."""
    h2 = netns_cluster.hosts[1]
    sessions = psutil.Process(h2.sshd.pid).children()  # one forked sshd per connection
    assert sessions
    for session in sessions:
        session.kill()
    cut = time.monotonic()
    assert long_job.wait(timeout_s=GUARD_S) != 0, long_job.output
    wait_no_leftovers(long_job.job_id, GUARD_S)
    print(f"job ended and every host clean {time.monotonic() - cut:.1f} s after the cut")
    assert f"lost the SSH connection to {h2.address}" in flat(long_job.output), long_job.output


def _job_pids_in(host, job_id: str) -> list[int]:
    """Live processes of job `job_id` in `host`'s network namespace (keepers and tasks)."""
    found = []
    for pid in subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split():
        try:
            proc = psutil.Process(int(pid))
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("ADRUN_JOB_ID") == job_id:
                found.append(proc.pid)
        except psutil.Error:
            pass
    return found


def test_silent_network_cut(netns_cluster, long_job):
    """Host 2's link goes down mid-run: no FIN, no RST, neither TCP stack notices. The launcher
    hears no heartbeat and fails the job naming the host; host 2's keeper hears no ping and ends
    its task (SILENCE_S, then SIGTERM and at worst SIGKILL 2 s later): nothing else can reach host 2
    while its link is down, so its tasks going away is the keeper's doing."""
    h2 = netns_cluster.hosts[1]
    assert _job_pids_in(h2, long_job.job_id)  # the keeper and w1
    subprocess.run(["ip", "link", "set", h2.veth, "down"], check=True)
    cut = time.monotonic()
    try:
        line = long_job.wait_for_line(rf"heard nothing from {re.escape(h2.address)} for \d+ s", timeout_s=GUARD_S)
        noticed = time.monotonic()
        while _job_pids_in(h2, long_job.job_id):
            assert time.monotonic() - noticed < GUARD_S, f"host 2 still runs {_job_pids_in(h2, long_job.job_id)}"
            time.sleep(0.1)
        gone = time.monotonic()
        print(f"noticed {noticed - cut:.1f} s after the cut; host 2's tasks gone {gone - cut:.1f} s after it")
        assert line.startswith(f"adrun: w1@{h2.address} (worker 1 on {h2.address}): heard nothing"), line
        assert long_job.wait(timeout_s=120) == 255, long_job.output
    finally:
        subprocess.run(["ip", "link", "set", h2.veth, "up"], check=True)
    text = flat(long_job.output)
    assert f"exit unknown: heard nothing from {h2.address} for" in text, long_job.output
    wait_no_leftovers(long_job.job_id, GUARD_S)


# --- the script must be on every node; --sync-code puts it there ---------------------------------


def test_missing_script_then_sync_code(netns_cluster, tmp_path):
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    spec = two_host_spec(tmp_path / "cluster.yml", netns_cluster, h2={"workdir": str(workdir)})
    h2 = netns_cluster.hosts[1].address

    missing = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec), "--quiet", RELATIVE_TINY, cwd=REPO, timeout=120)
    assert missing.returncode == 2, missing.output
    assert (f"adrun: error: {RELATIVE_TINY} not found on {h2} (at {workdir}/{RELATIVE_TINY}): copy it there, "
            "set ssh.workdir, or pass --sync-code") in flat(missing.stderr), missing.output
    assert "capturing" not in missing.output  # refused before the capture

    synced = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec), "--quiet", "--sync-code", RELATIVE_TINY, cwd=REPO, timeout=300)
    assert synced.returncode == 0, synced.output
    assert (workdir / RELATIVE_TINY).read_bytes() == (REPO / RELATIVE_TINY).read_bytes()
    assert not list(workdir.rglob("__pycache__")) and not list(workdir.rglob("*.pyc"))
    assert "network per node" in synced.output
    assert leftover_processes(synced.job_id) == []


# --- what is checked over SSH before the capture --------------------------------------------------


def test_taken_fixed_port_on_a_node_is_named(netns_cluster, tmp_path):
    h2 = netns_cluster.hosts[1]
    spec = two_host_spec(tmp_path / "cluster.yml", netns_cluster)
    spec.write_text(spec.read_text().replace("    workers: 1\n    ps: 0\n", "    workers: 1\n    ps: 0\n    base_port: 23500\n"))
    listener = subprocess.Popen(h2.exec_argv(sys.executable, "-c", "import socket, time; s = socket.socket(); "
                                             "s.bind(('', 23500)); s.listen(); print('up', flush=True); time.sleep(60)"),
                                stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "up"
        result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec), "--quiet", TINY, timeout=120)
    finally:
        listener.kill()
        listener.wait()
    assert result.returncode == 2, result.output
    assert f"adrun: error: port 23500 on {h2.address} is already in use" in result.stderr
    assert "capturing" not in result.output


def test_unreachable_node_is_named_before_the_capture(netns_cluster, tmp_path):
    h2 = netns_cluster.hosts[1].address
    spec = two_host_spec(tmp_path / "cluster.yml", netns_cluster, h2={"port": 2})
    result = run_adrun("--strategy", "PSLoadBalancing", "--spec", str(spec), "--quiet", TINY, timeout=120)
    assert result.returncode == 2, result.output
    assert f"nothing accepts SSH connections on {h2}:2 (connection refused)" in flat(result.stderr), result.output
    assert "capturing" not in result.output
