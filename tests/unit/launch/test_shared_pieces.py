"""What cluster check and a job share, written once in launch/nodes/: where a node's tasks run,
how adrun's own programs run on a node (carrying their helpers, so nothing must be installed
there), and when a port is taken or a file the same."""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from adrun.errors import UserError
from adrun.launch.check import cluster_check
from adrun.launch.job.backends import JobNodes
from adrun.launch.job.plan import plan_job
from adrun.launch.job.ports import allocate_ports
from adrun.launch.job.provision import RemoteNodes
from adrun.launch.job.remote import AGENT_SOURCE, agent_command
from adrun.launch.job.remote_agent import MARKER as AGENT_MARKER
from adrun.launch.nodes import node_tools
from adrun.launch.nodes.shell import Completed
from adrun.launch.nodes.transfer import PROBE_SOURCE, parse_probe, probe_command
from adrun.spec import ClusterSpec

pytestmark = pytest.mark.timeout(60)

HERE = socket.gethostname()  # this machine, by a name other nodes could reach
ELSEWHERE = "203.0.113.7"  # TEST-NET-3: never this machine
SOMEWHERE = "203.0.113.8"


def spec_of_three() -> ClusterSpec:
    """This machine (whose ssh.workdir only applies over SSH), a node with ssh.workdir, one without."""
    return ClusterSpec.model_validate({"version": 1, "nodes": [
        {"address": HERE, "chief": True, "ssh": {"workdir": "/not/used/here"}},
        {"address": ELSEWHERE, "ssh": {"workdir": "/srv/job"}},
        {"address": SOMEWHERE},
    ]})


class RecordingShell:
    """A node that has no usable Python: records the commands it was asked to run."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, command: str, timeout: float) -> Completed:
        self.commands.append(command)
        return Completed(127, "", "python: not found")


class PreparingLink:
    """A connected node as `backends.SshNode` uses it in `prepare`: the agent's answer (its chosen
    port, no strategy document there yet), and what was copied to it."""

    def __init__(self, node, port: int) -> None:
        self.node, self.address, self.port, self.sent = node, node.address, port, []

    def helper(self, mode: str, args: dict, timeout: float = 0) -> dict:
        assert mode == "prepare" and args["ports"] == {"base": None, "count": 1}
        assert [args["private_dir"]] == [posixpath.dirname(path) for path in args["files"]]  # made private there
        return {"ports": [self.port], "hashes": {path: None for path in args["files"]}, "private_dir": None,
                "net": {"sent": 0, "recv": 0}}

    def put(self, local: Path, remote: str) -> None:
        self.sent.append(remote)


def test_check_plan_and_provision_agree_on_each_nodes_workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = spec_of_three()
    expected = {HERE: str(tmp_path), ELSEWHERE: "/srv/job", SOMEWHERE: str(tmp_path)}

    checked = {}
    for node in spec.nodes:
        shell = RecordingShell()
        cluster_check._run_facts(cluster_check._Probed(node, node.address == HERE, shell), "train.py")
        checked[node.address] = json.loads(shlex.split(shell.commands[-1])[-1])["workdir"]

    remote = RemoteNodes(spec)
    remote.links = {node.address: PreparingLink(node, port) for node, port in zip(spec.nodes[1:], (2000, 3000))}
    nodes = JobNodes(spec, remote)
    strategy_file = tmp_path / "s.yml"
    strategy_file.write_text("plan\n")
    nodes.prepare(strategy_file)
    launches = plan_job(spec, "train.py", [], job_id="j", strategy_file=strategy_file, nodes=nodes, base_env={})
    planned = {launch.task.host: str(launch.cwd) for launch in launches}
    assert {launch.task.host: launch.task.port for launch in launches if launch.task.remote} == \
        {ELSEWHERE: 2000, SOMEWHERE: 3000}  # the ports each node's own `prepare` chose
    assert {link.address: link.sent for link in remote.links.values()} == \
        {ELSEWHERE: [str(strategy_file.resolve())], SOMEWHERE: [str(strategy_file.resolve())]}

    provisioned = {node.address: posixpath.dirname(remote._remote_path(SimpleNamespace(node=node), Path("train.py")))
                   for node in remote.nodes}

    assert checked == planned == expected
    assert provisioned == {ELSEWHERE: "/srv/job", SOMEWHERE: str(tmp_path)}  # only other nodes are provisioned


def test_probe_and_agent_commands_run_a_node_program_the_same_way():
    """Same interpreter, same node env, same activate; only the keeper changes directory first."""
    node = spec_of_three().nodes[1].model_copy(update={"python": "/opt/py 3/bin/python", "env": {"A": "1 2"}})
    node.ssh = node.ssh.model_copy(update={"activate": "source /venv/bin/activate"})
    probe = shlex.split(probe_command(node, "facts", {}, local=False))
    agent = shlex.split(agent_command(node, "run", workdir="/srv/job", job_id="j1"))
    assert agent[:3] == ["cd", "/srv/job", "&&"]
    common = ["source", "/venv/bin/activate", "&&", "exec", "env", "A=1 2"]
    assert probe[:6] == common and agent[3:9] == common
    assert probe[6:9] == ["/opt/py 3/bin/python", "-u", "-c"]
    assert agent[9:13] == ["ADRUN_JOB_ID=j1", "/opt/py 3/bin/python", "-u", "-c"]


def _run_without_adrun(source: str, *args: str, cwd: Path) -> str:
    """`python -S`: no site-packages, so adrun (and TensorFlow) cannot be imported, as on a bare node."""
    done = subprocess.run([sys.executable, "-S", "-c", source, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_node_programs_need_nothing_installed_and_judge_ports_and_files_as_the_launcher(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(b"x = 1\n")
    digest = hashlib.sha256(b"x = 1\n").hexdigest()
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        taken = held.getsockname()[1]

        facts = parse_probe(_run_without_adrun(PROBE_SOURCE, "facts", json.dumps(
            {"workdir": str(tmp_path), "script": "train.py", "ports": [taken]}), cwd=tmp_path))
        assert facts is not None and facts["adrun"] is None  # nothing of adrun was importable
        assert facts["ports_taken"] == [taken] and facts["script"]["sha256"] == digest

        lines = _run_without_adrun(AGENT_SOURCE, "prepare", json.dumps(
            {"ports": {"base": taken, "count": 1}, "files": [str(script), str(tmp_path / "gone.py")]}), cwd=tmp_path)
        prepared = json.loads(lines.splitlines()[-1].removeprefix(AGENT_MARKER))
        assert prepared["taken"] == [taken]
        assert prepared["hashes"] == {str(script): digest, str(tmp_path / "gone.py"): None}

        assert node_tools.taken_ports([taken]) == [taken] and node_tools.file_sha256(str(script)) == digest
        here = ClusterSpec.model_validate({"version": 1, "nodes": [{"address": "localhost", "base_port": taken}]})
        with pytest.raises(UserError, match=f"port {taken} on localhost is already in use"):
            allocate_ports(here.nodes)

    lines = _run_without_adrun(AGENT_SOURCE, "prepare", json.dumps({"ports": {"base": None, "count": 3}, "files": []}),
                               cwd=tmp_path)
    chosen = json.loads(lines.splitlines()[-1].removeprefix(AGENT_MARKER))["ports"]
    assert len(set(chosen)) == 3 and all(1024 <= port <= 65535 for port in chosen)
