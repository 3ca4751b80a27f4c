"""`cluster check` on a node that is this machine: checked without SSH, no root needed."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from adrun.launch.check.cluster_check import run_checks
from adrun.launch.check.report import CHECKS
from adrun.spec import ClusterSpec

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SCRIPT = "tests/scripts/oracle_model.py"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def test_local_node_checked_without_ssh() -> None:
    spec = ClusterSpec(version=1, nodes=[{"address": "localhost", "workers": 2, "ps": 1, "base_port": 23500}])
    report = run_checks(spec, SCRIPT)
    (node,) = report.nodes
    assert node.local
    skipped = {"ssh", "host_key", "bandwidth"}  # no SSH for this machine; one node has no pairs
    assert {name: r.status for name, r in node.results.items()} == {
        name: "skip" if name in skipped else "pass" for name in CHECKS}
    assert node.results["ssh"].detail == "this machine"
    assert node.results["script"].detail == str(REPO / SCRIPT)
    assert report.exit_code == 0


def test_local_node_with_other_tensorflow(tmp_path: Path) -> None:
    fake = tmp_path / "fake-tf"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text('__version__ = "2.20.0"\n')
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={fake} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    spec = ClusterSpec(version=1, nodes=[{"address": "localhost", "python": str(wrapper)}])
    report = run_checks(spec)
    versions = report.nodes[0].results["versions"]
    assert versions.status == "fail"
    assert versions.detail == f"tf {importlib.metadata.version('tensorflow')} here, 2.20.0 on localhost"
    assert report.exit_code == 1
