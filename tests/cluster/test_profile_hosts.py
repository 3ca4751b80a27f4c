"""`adrun profile` on two namespace hosts over SSH: the path between the hosts is measured both ways,
the strategies' bytes cross it, and a trial runs on both hosts, is recorded with each node's bytes,
and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from adrun.profile.report import ProfileReport
from adrun.records.store import cluster_key, open_records
from adrun.spec import load_spec
from tests.cluster.netns import NetnsCluster, two_host_spec
from tests.support.adrun_cli import run_adrun
from tests.support.paths import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.full]


def test_profile_measures_the_hosts_path_and_tries_on_both(netns_cluster: NetnsCluster, tmp_path: Path) -> None:
    spec = two_host_spec(tmp_path / "cluster.yml", netns_cluster)  # a worker on each host, the PS on the first
    records = tmp_path / "records.sqlite"
    job_id = "profile-two-hosts"
    result = run_adrun("profile", "--job-id", job_id, "--json", "--spec", str(spec), "--records", str(records),
                       "--trials", "1", "--trial-steps", "10", str(REPO / "examples" / "embedding.py"),
                       job_id=job_id, timeout=900)
    assert result.returncode == 0, result.output
    report = ProfileReport.model_validate_json(result.stdout)
    first, second = (host.address for host in netns_cluster.hosts[:2])
    assert [(n.address, n.chief) for n in report.cluster.nodes] == [(first, True), (second, False)]
    between = [(link.src, link.dst, link.source) for link in report.cluster.links if link.src != link.dst]
    assert between == [(first, second, "measured"), (second, first, "measured")]
    assert all(link.mbit_s > 0 for link in report.cluster.links)
    for candidate in report.candidates:  # every plan moves bytes between the hosts
        assert candidate.prediction.busiest_link in (f"{first} -> {second}", f"{second} -> {first}")
        assert candidate.prediction.busiest_link_bytes > 0
    print("paths:", [(link.src, link.dst, round(link.mbit_s)) for link in report.cluster.links],
          "predicted:", [(c.builder, round(c.prediction.step_s * 1e3, 1)) for c in report.candidates])
    [tried] = [c for c in report.candidates if c.trial is not None]
    assert tried is report.candidates[0] and tried.trial.succeeded and tried.trial.step_s > 0, tried.trial
    for jid in (job_id, tried.trial.job_id):
        assert leftover_processes(jid) == [], jid
    with open_records(records) as db:
        [kept] = db.trials(cluster_key(load_spec(spec)))
    assert kept.strategy.builder == tried.builder and set(kept.node_bytes) == {first, second}
    print("trial:", tried.builder, tried.trial.step_s, "recorded bytes:", kept.node_bytes)
