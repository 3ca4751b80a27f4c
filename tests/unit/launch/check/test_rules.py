"""The pure parts of `cluster check`: judgements, remedy texts, SSH error mapping, report shape, probe."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from pathlib import Path

import paramiko
import pytest
from rich.console import Console

from adrun.launch.nodes import node_tools, probe
from adrun.launch.nodes.transfer import probe_command
from adrun.launch.check.report import CHECKS, CheckReport, CheckResult, NodeReport, PairBandwidth, render
from adrun.launch.check.rules import (MAX_CLOCK_SKEW, judge_bandwidth, judge_clock, judge_cpus, judge_disk,
                                      judge_exposure, judge_gpus, judge_memory, judge_ports, judge_python, judge_script,
                                      judge_versions, version_diff)
from adrun.launch.nodes.ssh import explain_failure
from adrun.spec import Node

HERE = {"python": "3.11.7", "tensorflow": "2.21.0", "keras": "3.15.1", "adrun": "0.1.0", "executable": "/venv/bin/python"}
ADDR = "10.0.0.2"


def node(**fields) -> Node:
    return Node(address=ADDR, **fields)


# -- versions -----------------------------------------------------------------------------------
def test_version_diff_names_component_both_versions_and_node() -> None:
    there = HERE | {"tensorflow": "2.20.0"}
    assert version_diff(HERE, there, ADDR) == ["tf 2.21.0 here, 2.20.0 on 10.0.0.2"]


def test_version_diff_ignores_python_patch_level_but_not_minor() -> None:
    assert version_diff(HERE, HERE | {"python": "3.11.2"}, ADDR) == []
    assert version_diff(HERE, HERE | {"python": "3.12.1"}, ADDR) == ["python 3.11.7 here, 3.12.1 on 10.0.0.2"]


def test_version_diff_missing_module_shows_import_error() -> None:
    there = HERE | {"tensorflow": None, "tensorflow_error": "ModuleNotFoundError: No module named 'tensorflow'"}
    assert version_diff(HERE, there, ADDR) == [
        "tf 2.21.0 here, missing on 10.0.0.2 (ModuleNotFoundError: No module named 'tensorflow')"]


def test_judge_versions_remedy_installs_launcher_versions() -> None:
    there = HERE | {"tensorflow": "2.20.0", "keras": "3.14.0", "adrun": "0.0.9", "executable": "/opt/py/bin/python"}
    result = judge_versions(HERE, there, ADDR)
    assert result.status == "fail"
    assert result.detail == ("tf 2.21.0 here, 2.20.0 on 10.0.0.2; keras 3.15.1 here, 3.14.0 on 10.0.0.2; "
                             "adrun 0.1.0 here, 0.0.9 on 10.0.0.2")
    assert result.remedy == ("on 10.0.0.2: pip install tensorflow==2.21.0 in /opt/py/bin/python; "
                             "pip install keras==3.15.1 in /opt/py/bin/python; "
                             "pip install adrun==0.1.0 in /opt/py/bin/python")
    assert judge_versions(HERE, dict(HERE), ADDR).status == "pass"


# -- other judgements -----------------------------------------------------------------------------
def test_judge_python_distinguishes_missing_interpreter_from_timeout() -> None:
    missing = judge_python(node(), "/no/python", 127, "sh: 1: /no/python: not found\n", ADDR)
    assert missing.status == "fail" and missing.detail.startswith("/no/python not found")
    assert "nodes[].python" in missing.remedy
    slow = judge_python(node(), "python3", None, "", ADDR)
    assert "did not answer in time" in slow.detail


def test_judge_script_missing_and_different() -> None:
    here = {"path": "/w/train.py", "sha256": "aa"}
    assert judge_script(here, {"path": "/w/train.py", "sha256": None}, ADDR).detail == "/w/train.py not found on 10.0.0.2"
    assert "differs" in judge_script(here, {"path": "/w/train.py", "sha256": "bb"}, ADDR).detail
    assert judge_script(here, dict(here), ADDR).status == "pass"
    assert judge_script(None, None, ADDR).status == "skip"


def test_judge_ports() -> None:
    fixed = node(workers=1, ps=1, base_port=23000)
    assert judge_ports(fixed, [23000, 23001], [23001], ADDR).detail == "port 23001 in use on 10.0.0.2"
    assert judge_ports(fixed, [23000, 23001], [], ADDR) == CheckResult("pass", "23000-23001 free")
    assert judge_ports(node(), [], [], ADDR).status == "skip"


def test_judge_resources_against_spec() -> None:
    assert judge_cpus(node(cpus=8), 2, ADDR).detail == "spec says 8 CPUs, 10.0.0.2 has 2"
    assert judge_cpus(node(cpus=2), 2, ADDR).status == "pass"
    assert judge_gpus(node(gpus=1), None, ADDR).detail == "spec says 1 GPUs, 10.0.0.2 has 0 (no nvidia-smi)"
    assert judge_gpus(node(), None, ADDR) == CheckResult("pass", "none")
    assert judge_gpus(node(gpus=2), ["T4", "T4"], ADDR) == CheckResult("pass", "2× T4")
    gib = 1 << 30
    assert judge_memory(node(workers=4, ps=2), 8 * gib, gib, ADDR).status == "fail"
    assert judge_memory(node(workers=1), 8 * gib, 4 * gib, ADDR).status == "pass"
    assert judge_disk("/w", False, None, ADDR).detail == "working directory /w does not exist on 10.0.0.2"
    assert judge_disk("/w", True, gib // 2, ADDR).status == "fail"
    assert judge_disk("/w", True, 50 * gib, ADDR) == CheckResult("pass", "50 GiB free")


def test_judge_clock_allows_measurement_uncertainty() -> None:
    assert judge_clock(0.002, 0.001, ADDR).status == "pass"
    assert judge_clock(MAX_CLOCK_SKEW + 0.5, 0.01, ADDR).status == "fail"
    assert judge_clock(-(MAX_CLOCK_SKEW + 0.5), 0.01, ADDR).detail.startswith("clock of 10.0.0.2 is -1.50 s")
    assert judge_clock(MAX_CLOCK_SKEW + 0.5, 0.6, ADDR).status == "pass"  # cannot tell
    assert judge_clock(None, 0.0, ADDR).status == "fail"


def test_judge_bandwidth_blames_only_nodes_on_the_broken_pair() -> None:
    pairs = [PairBandwidth("a", "b", 900.0), PairBandwidth("a", "c", None, "timed out"), PairBandwidth("b", "c", 300.0)]
    assert judge_bandwidth("b", pairs, True, 3) == CheckResult("pass", "300 Mbit/s")
    assert judge_bandwidth("a", pairs, True, 3).detail == "no TCP stream from a to c: timed out"
    assert judge_bandwidth("c", pairs, True, 3).status == "fail"
    assert judge_bandwidth("a", [], True, 1).status == "skip"


# -- SSH error mapping ------------------------------------------------------------------------------
@pytest.mark.parametrize("error, check, words", [
    (paramiko.SSHException("Server '10.0.0.2' not found in known_hosts"), "host_key", "not in /kh"),
    (paramiko.BadHostKeyException("10.0.0.2", paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)),
     "host_key", "differs"),
    (paramiko.AuthenticationException("Authentication failed."), "ssh", "refused /k for root"),
    (paramiko.ssh_exception.NoValidConnectionsError({("10.0.0.2", 2222): ConnectionRefusedError()}), "ssh",
     "connection refused"),
    (TimeoutError(), "ssh", "no answer"),
])
def test_explain_failure(error: BaseException, check: str, words: str) -> None:
    n = node(ssh={"user": "root", "port": 2222, "identity_file": "/k"})
    why = explain_failure(error, n, known_hosts="/kh")
    assert why.check == check
    assert words in why.message
    assert why.remedy and "\n" not in why.remedy


def test_exposure_says_whether_a_job_s_ports_would_be_open_and_what_to_do() -> None:
    closed = judge_exposure(None, ADDR)
    assert closed.status == "pass" and closed.detail == "task ports closed to other hosts (nftables)"
    problem = "nft: Operation not permitted (you must be root) (adrun runs as uid 1000: packet-filter rules need root)"
    open_ = judge_exposure(problem, ADDR)
    assert open_.status == "fail"
    assert open_.detail.startswith(f"a job's TensorFlow servers on {ADDR} would accept connections from any host")
    assert problem in open_.detail
    assert f"as root on {ADDR} with nftables installed" in open_.remedy and "--allow-exposed" in open_.remedy
    report = CheckReport([NodeReport(ADDR, False, {name: CheckResult("pass", "ok") for name in CHECKS} | {
        "exposure": open_})])
    assert json.loads(report.to_json())["nodes"][0]["checks"]["exposure"]["status"] == "fail" and report.exit_code == 1


# -- report ---------------------------------------------------------------------------------------
def _report(fail: bool) -> CheckReport:
    results = {name: CheckResult("pass", "ok") for name in CHECKS}
    if fail:
        results["ports"] = CheckResult("fail", "port 23001 in use on b", "choose another base_port")
    return CheckReport([NodeReport("a", True, {name: CheckResult("pass", "ok") for name in CHECKS}),
                        NodeReport("b", False, results)], [PairBandwidth("a", "b", 940.0)])


def test_report_json_shape() -> None:
    data = json.loads(_report(fail=True).to_json())
    assert data["ok"] is False
    assert [n["address"] for n in data["nodes"]] == ["a", "b"]
    assert list(data["nodes"][1]["checks"]) == list(CHECKS)
    assert data["nodes"][1]["checks"]["ports"] == {
        "status": "fail", "detail": "port 23001 in use on b", "remedy": "choose another base_port"}
    assert data["nodes"][0]["ok"] is True and data["nodes"][1]["ok"] is False
    assert data["pairs"] == [{"source": "a", "target": "b", "mbit_s": 940.0, "error": None}]


def test_exit_code_only_zero_when_nothing_failed() -> None:
    assert _report(fail=False).exit_code == 0
    assert _report(fail=True).exit_code == 1


def test_failed_result_needs_remedy() -> None:
    with pytest.raises(ValueError):
        CheckResult("fail", "broken")
    with pytest.raises(ValueError):
        CheckResult("pass", "fine", "do something")


def test_render_table_then_remedies() -> None:
    console = Console(record=True, width=200)
    render(_report(fail=True), console)
    text = console.export_text()
    assert "(local)" in text and "✗" in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert "✗" in rows["ports"] and "✗" not in rows["ssh"]  # a row per check, a column per node
    assert "✗ b ports: port 23001 in use on b\n    → choose another base_port" in text
    assert "1 check(s) failed" in text
    console = Console(record=True, width=200)
    render(_report(fail=False), console)
    assert "✓ every check passed" in console.export_text()


def test_render_fits_80_columns_for_three_nodes() -> None:
    nodes = [NodeReport(f"10.0.0.{i}", False, {name: CheckResult("pass", "python 3.11.2, tf 2.21.0, adrun 0.1.0")
                                               for name in CHECKS}) for i in range(3)]
    console = Console(record=True, width=80)
    render(CheckReport(nodes), console)
    assert max(len(line) for line in console.export_text().splitlines()) <= 80


# -- probe (runs in this process; the same code runs on nodes) --------------------------------------
def test_probe_script_hash_and_port_test(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_bytes(b"print('hi')\n")
    assert probe._script(str(tmp_path), "train.py") == {
        "path": str(tmp_path / "train.py"), "sha256": hashlib.sha256(b"print('hi')\n").hexdigest()}
    assert probe._script(str(tmp_path), "missing.py") == {"path": str(tmp_path / "missing.py"), "sha256": None}
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        taken = held.getsockname()[1]
        assert node_tools.taken_ports([taken]) == [taken]
    assert node_tools.taken_ports([taken]) == []  # released again (and the probe's own bind left nothing behind)


def test_probe_send_recv_counts_every_byte() -> None:
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    received: dict = {}
    thread = threading.Thread(target=lambda: received.update(probe.recv({"port": port, "timeout": 10})))
    thread.start()
    sent = probe.send({"host": "127.0.0.1", "port": port, "nbytes": 3 << 20, "connect_timeout": 5, "timeout": 10})
    thread.join(timeout=15)
    assert received == {"bytes": 3 << 20}
    assert sent["bytes"] == 3 << 20 and sent["seconds"] > 0


def test_probe_command_applies_node_env_and_remote_activate() -> None:
    n = node(python="/venv/bin/python", env={"LD_LIBRARY_PATH": "/opt/cuda lib"},
             ssh={"activate": "source /venv/bin/activate"})
    remote = probe_command(n, "facts", {"ports": []}, local=False)
    assert remote.startswith(
        "source /venv/bin/activate && exec env LD_LIBRARY_PATH='/opt/cuda lib' /venv/bin/python -u -c ")
    assert remote.endswith(" facts '{\"ports\": []}'")
    local = probe_command(n, "facts", {}, local=True)
    assert local.startswith("exec env LD_LIBRARY_PATH=")  # activate belongs to SSH logins only
