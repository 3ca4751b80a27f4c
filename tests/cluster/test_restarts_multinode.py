"""Restarts across two network-namespace hosts (w0 + ps0 on host 1, w1 on host 2, all over SSH).

A remote worker killed mid-run is restarted and the job ends at the uninterrupted run's variables;
a node whose sshd is gone when the restart comes is named, and the job ends instead of retrying.
Both wait for the script's own `paused` file, never for a time.
"""

from __future__ import annotations

import psutil
import pytest

from adrun.launch.job.report import JobReport
from adrun.launch.job.teardown import leftover_processes
from tests.cluster.netns import two_host_spec
from tests.support.adrun_cli import flat
from tests.support.live_jobs import job_process
from tests.support.restart_oracle import MODEL, PAUSE_AT, STEPS, assert_ends_as_an_uninterrupted_run


pytestmark = [pytest.mark.cluster, pytest.mark.full]


def _start(netns_cluster, tmp_path, live, *options: str):
    out = tmp_path / "adrun"
    out.mkdir()
    spec = two_host_spec(tmp_path / "cluster.yml", netns_cluster)
    job = live("--spec", str(spec), "--strategy", "PSLoadBalancing", "--max-restarts", "1", "--restart-backoff", "0",
               "--result-json",
               str(tmp_path / "result.json"), *options, MODEL, "--checkpoint-dir", str(out / "ckpt"), "--out", str(out),
               "--steps", str(STEPS), "--pause-on", "1", "--pause-at", str(PAUSE_AT))
    job.wait_for_file(out / "paused")
    return job, out


def test_a_killed_remote_worker_is_restarted_and_ends_as_an_uninterrupted_run(netns_cluster, tmp_path, live):
    h2 = netns_cluster.hosts[1].address
    job, out = _start(netns_cluster, tmp_path, live)
    first = leftover_processes(job.job_id)  # tasks and keepers of attempt 0 on both hosts (one kernel)
    job_process(job.job_id, "worker", 1).kill()
    job.wait_for_line(rf"^\[w1@{h2}\] attempt 1 starts at global step 10$")
    assert not [p for p in first if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert job.wait(timeout_s=300) == 0, job.output
    assert leftover_processes(job.job_id) == []
    assert_ends_as_an_uninterrupted_run(out, tmp_path)
    report = JobReport.model_validate_json((tmp_path / "result.json").read_text())
    assert [(a.attempt, a.root_cause, a.restarted) for a in report.attempts] == [
        (0, f"w1@{h2} (worker 1 on {h2}) was killed by SIGKILL", True), (1, None, False)]


def test_a_node_gone_at_restart_time_is_named_and_not_retried(netns_cluster, tmp_path, live):
    host = netns_cluster.hosts[1]
    job, _ = _start(netns_cluster, tmp_path, live)
    try:
        netns_cluster.stop_sshd(host)  # its sessions (and with them w1) end; no new connection is accepted
        code = job.wait(timeout_s=120)
    finally:
        netns_cluster.start_sshd(host)
        netns_cluster.wait_sshd(host)
    assert code != 0, job.output
    assert leftover_processes(job.job_id) == []
    text = flat(job.output)
    reason = f"node {host.address} cannot be reached: nothing accepts SSH connections on {host.address}:22 " \
             f"(connection refused): start sshd on {host.address}"
    assert "adrun: attempt 0: not restarted: " in text and reason in text, job.output
    report = JobReport.model_validate_json((tmp_path / "result.json").read_text())
    [attempt] = report.attempts
    assert not attempt.restarted and reason in attempt.verdict
    assert report.exit_code == code
