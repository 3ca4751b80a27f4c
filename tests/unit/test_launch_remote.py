"""Remote launch pieces without a cluster: the command line, the forwarded environment, the
keeper (run here as a local subprocess, as sshd would run it), and what --sync-code copies."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from adrun.errors import UserError
from adrun.launch import provision, remote_agent
from adrun.launch.env import forwarded_env, remote_task_env
from adrun.launch.remote import AGENT_SOURCE, agent_command
from adrun.launch.tasks import Task

pytestmark = pytest.mark.timeout(60)


@dataclass
class SSH:
    activate: str | None = None


@dataclass
class Node:
    ssh: SSH | None = None


def test_agent_command_quotes_every_value():
    command = agent_command(Node(SSH("source '/my venv/bin/activate'")), "/opt/my python/bin/python", "run",
                            workdir="/srv/it's here", job_id="job 1")
    words = shlex.split(command)
    assert words[:3] == ["cd", "/srv/it's here", "&&"]
    assert "exec" in words and words[words.index("exec") + 1:words.index("exec") + 4] == [
        "env", "ADRUN_JOB_ID=job 1", "/opt/my python/bin/python"]
    assert words[-1] == "run" and AGENT_SOURCE in words


def test_only_named_variables_and_adrun_settings_are_forwarded():
    launcher = {"WANDB_API_KEY": "k", "HOME": "/root", "PATH": "/bin", "ADRUN_SHARD_DATA": "1", "ADRUN_JOB_ID": "old"}
    assert forwarded_env(launcher, ["WANDB_API_KEY", "UNSET"]) == {"WANDB_API_KEY": "k", "ADRUN_SHARD_DATA": "1"}
    env = remote_task_env(Task("worker", 1, "10.0.0.2", 2001, remote=True), "job-7", 2, {"worker": ["a:1", "b:2"]},
                          "/tmp/s.yml", launcher, ["WANDB_API_KEY"], {"OMP_NUM_THREADS": "4"})
    assert env["ADRUN_JOB_ID"] == "job-7" and env["ADRUN_WORKER_INDEX"] == "1"
    assert env["WANDB_API_KEY"] == "k" and env["OMP_NUM_THREADS"] == "4"
    assert "HOME" not in env and "PATH" not in env and "PYTHONPATH" not in env  # the node's own stay


def test_remote_task_label_names_the_host():
    assert Task("worker", 1, "10.0.0.2", 1, remote=True).label == "w1@10.0.0.2"
    assert Task("ps", 0, "localhost", 1).label == "ps0"


def _keeper(tmp_path: Path, argv: list[str], job_id: str) -> subprocess.Popen[bytes]:
    """The keeper as sshd would start it: stdin/stdout/stderr pipes, spec on the first line."""
    proc = subprocess.Popen([sys.executable, "-c", AGENT_SOURCE, "run"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    spec = {"argv": argv, "env": {"ADRUN_JOB_ID": job_id}, "lease_s": 30}
    proc.stdin.write((json.dumps(spec) + "\n").encode())
    proc.stdin.flush()
    return proc


def test_keeper_reports_a_signal_death(tmp_path):
    proc = _keeper(tmp_path, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], "k1")
    lines = [proc.stderr.readline().decode().rstrip("\n") for _ in range(2)]  # stdin stays open meanwhile
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    assert lines[0].startswith(remote_agent.STARTED_MARKER)
    assert lines[1] == remote_agent.EXIT_MARKER + json.dumps({"returncode": -9})


def test_keeper_kills_the_task_group_when_its_channel_closes(tmp_path):
    job_id = f"keeper-{os.getpid()}-{time.monotonic_ns()}"
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    proc = _keeper(tmp_path, [sys.executable, "-c", code], job_id)
    deadline = time.monotonic() + 20
    while len(remote_agent.job_pids(job_id)) < 2:  # task and grandchild (this keeper is untagged)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.stdin.close()  # what a dead launcher or a cut connection looks like from the node
    closed = time.monotonic()
    proc.wait(timeout=10)
    while remote_agent.job_pids(job_id):
        assert time.monotonic() - closed < 5, [psutil.Process(p).cmdline() for p in remote_agent.job_pids(job_id)]
        time.sleep(0.05)


def test_sync_files_skip_caches_and_have_a_limit(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.py").write_text("")
    for junk in (".git/config", "__pycache__/train.cpython-311.pyc", ".venv/bin/python", "lib/old.pyc"):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_text("")
    files = provision.sync_files(tmp_path / "train.py")
    assert sorted(f.relative_to(tmp_path).as_posix() for f in files) == ["lib/util.py", "train.py"]
    monkeypatch.setattr(provision, "SYNC_LIMIT", 3)
    with pytest.raises(UserError, match="more than 0 MiB"):
        provision.sync_files(tmp_path / "train.py")
