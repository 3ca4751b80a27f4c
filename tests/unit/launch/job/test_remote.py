"""Remote launch pieces without a cluster: the command line, the forwarded environment, the
keeper (run here as a local subprocess, as sshd would run it), and what --sync-code copies."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from adrun.errors import UserError
from adrun.launch.job import provision, remote, remote_agent
from adrun.launch.nodes import node_tools
from adrun.launch.env import forwarded_env, remote_task_env, run_context
from adrun.launch.job.remote import AGENT_SOURCE, Hearing, RemoteProcess, agent_command
from adrun.launch.job.tasks import Task
from adrun.spec import Node
from adrun.task_events import ErrorEvent, decode, encode

pytestmark = pytest.mark.timeout(60)


def test_agent_command_quotes_every_value():
    node = Node(address="10.0.0.2", python="/opt/my python/bin/python", env={"OMP_NUM_THREADS": "4 4"},
                ssh={"activate": "source '/my venv/bin/activate'"})
    command = agent_command(node, "run", workdir="/srv/it's here", job_id="job 1")
    words = shlex.split(command)
    assert words[:6] == ["cd", "/srv/it's here", "&&", "source", "/my venv/bin/activate", "&&"]
    assert "exec" in words and words[words.index("exec") + 1:words.index("exec") + 5] == [
        "env", "OMP_NUM_THREADS=4 4", "ADRUN_JOB_ID=job 1", "/opt/my python/bin/python"]
    assert words[-1] == "run" and AGENT_SOURCE in words


def test_only_named_variables_and_adrun_settings_are_forwarded():
    launcher = {"WANDB_API_KEY": "k", "HOME": "/root", "PATH": "/bin", "ADRUN_SHARD_DATA": "1", "ADRUN_JOB_ID": "old"}
    assert forwarded_env(launcher, ["WANDB_API_KEY", "UNSET"]) == {"WANDB_API_KEY": "k", "ADRUN_SHARD_DATA": "1"}
    context = run_context(Task("worker", 1, "10.0.0.2", 2001, remote=True), "job-7", 2, {"worker": ["a:1", "b:2"]},
                          strategy_file="/tmp/s.yml")
    env = remote_task_env(context, launcher, ["WANDB_API_KEY"], {"OMP_NUM_THREADS": "4"})
    assert env["ADRUN_JOB_ID"] == "job-7" and env["ADRUN_WORKER_INDEX"] == "1"
    assert env["WANDB_API_KEY"] == "k" and env["OMP_NUM_THREADS"] == "4"
    assert "HOME" not in env and "PATH" not in env and "PYTHONPATH" not in env  # the node's own stay


def test_remote_task_label_names_the_host():
    assert Task("worker", 1, "10.0.0.2", 1, remote=True).label == "w1@10.0.0.2"
    assert Task("ps", 0, "localhost", 1).label == "ps0"


def _keeper(tmp_path: Path, argv: list[str], job_id: str, lease_s: float = 30, **more: str) -> subprocess.Popen[bytes]:
    """The keeper as sshd would start it: stdin/stdout/stderr pipes, spec (with `more`) on the first line."""
    proc = subprocess.Popen([sys.executable, "-c", AGENT_SOURCE, "run"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    spec = {"argv": argv, "env": {"ADRUN_JOB_ID": job_id}, "lease_s": lease_s, "beat_s": 0.2, **more}
    proc.stdin.write((json.dumps(spec) + "\n").encode())
    proc.stdin.flush()
    return proc


def test_keeper_reports_a_signal_death(tmp_path):
    proc = _keeper(tmp_path, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], "k1")
    # stdin stays open meanwhile; heartbeats (no newline) may come before either line
    lines = [proc.stderr.readline().replace(remote_agent.HEARTBEAT, b"").decode().rstrip("\n") for _ in range(2)]
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    assert lines[0].startswith(remote_agent.STARTED_MARKER)
    assert lines[1] == remote_agent.EXIT_MARKER + json.dumps({"returncode": -9})


def test_keeper_releases_its_task_from_the_finish_barrier_on_the_launchers_word(tmp_path):
    """The task (a worker at the finish barrier) says it waits, then blocks on the pipe the keeper
    made for it; RELEASE, sent only after that, is what lets it end."""
    task = ("import os, sys; fd = int(os.environ['ADRUN_RELEASE_FD']); print('waiting', flush=True); "
            "print('read', os.read(fd, 100), flush=True)")
    proc = _keeper(tmp_path, [sys.executable, "-c", task], "k-release", release_var="ADRUN_RELEASE_FD")
    assert proc.stdout.readline() == b"waiting\n"
    proc.stdin.write(b"RELEASE\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"read b'release\\n'\n"
    assert proc.wait(timeout=20) == 0
    status = proc.stderr.read().replace(remote_agent.HEARTBEAT, b"").decode().splitlines()[-1]
    assert status == remote_agent.EXIT_MARKER + json.dumps({"returncode": 0})
    proc.stdin.close()


def test_keeper_kills_the_task_group_when_its_channel_closes(tmp_path):
    job_id = f"keeper-{os.getpid()}-{time.monotonic_ns()}"
    # both would sleep for 10 minutes: their end within the guard below is the keeper's doing
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    proc = _keeper(tmp_path, [sys.executable, "-c", code], job_id)
    deadline = time.monotonic() + 20
    while len(node_tools.job_pids(job_id)) < 2:  # task and grandchild (this keeper is untagged)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.stdin.close()  # what a dead launcher or a cut connection looks like from the node
    closed = time.monotonic()
    proc.wait(timeout=20)
    while node_tools.job_pids(job_id):
        assert time.monotonic() - closed < 30, [psutil.Process(p).cmdline() for p in node_tools.job_pids(job_id)]
        time.sleep(0.05)


def test_keeper_beats_and_ends_its_task_when_the_pings_stop(tmp_path):
    """A silent cut seen from the node: stdin stays open but no PING comes. The keeper, pinged
    for a while, keeps the task; then it stops it (the lease), and it said it was alive meanwhile."""
    job_id = f"keeper-{os.getpid()}-{time.monotonic_ns()}"
    task = "import sys, time\nwhile True:\n    sys.stderr.write('half a line'); sys.stderr.flush(); time.sleep(0.1)"
    proc = _keeper(tmp_path, [sys.executable, "-c", task], job_id, lease_s=2.0)
    started = proc.stderr.readline()
    assert started.startswith(remote_agent.STARTED_MARKER.encode())
    pinged = time.monotonic()
    # twice the lease, pinged ten times per lease (a busy machine may delay a few): the task lives on
    while time.monotonic() - pinged < 4.0:
        proc.stdin.write(b"PING\n")
        proc.stdin.flush()
        time.sleep(0.2)
    assert len(node_tools.job_pids(job_id)) == 1
    assert proc.wait(timeout=20) == 0  # no more pings: the lease runs out and the group ends
    assert node_tools.job_pids(job_id) == []
    rest = proc.stderr.read()
    assert rest.count(remote_agent.HEARTBEAT) >= 5  # every 0.2 s, inside the task's unfinished line
    task_part, marker, status = rest.replace(remote_agent.HEARTBEAT, b"").partition(remote_agent.EXIT_MARKER.encode())
    assert task_part.replace(b"half a line", b"") == b"" and marker and json.loads(status) == {"returncode": -15}
    proc.stdin.close()


class _Channel:
    """What _Markers reads of a paramiko channel: stderr in the given chunks, then EOF."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def recv_stderr(self, size: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def test_heartbeats_are_taken_out_of_the_task_stderr_wherever_they_land():
    beat = remote_agent.HEARTBEAT
    stream = (b"first " + beat + b"line\n" + beat + b"@@ADRUN-STARTED {\"pid\": 42}\n\n" + beat
              + b"says @@ADRUN-EXIT in passing\n" + beat
              + "caf\u00e9 ".encode() + beat + b"unfinished@@ADRUN-EXIT {\"returncode\": 3}\n")
    for cut in range(1, len(stream)):  # every place a chunk boundary can fall, also inside a heartbeat
        hearing = Hearing()
        proc = RemoteProcess("node-b", _FakeSession([stream[:cut], stream[cut:]]), hearing)
        assert list(proc.stderr) == [b"first line\n", b"\n", b"says @@ADRUN-EXIT in passing\n",
                                     "caf\u00e9 unfinished\n".encode()], cut
        assert (proc.pid, proc.poll()) == (42, 3) and hearing._last is not None


def test_a_tasks_events_cross_the_keepers_channel_intact():
    """What a remote task reports (adrun/task_events.py) reaches the supervisor as the same event,
    wherever chunk boundaries and heartbeats fall inside its line."""
    beat = remote_agent.HEARTBEAT
    error = ErrorEvent("tensorflow.python.framework.errors_impl.AbortedError", "step aborted: caf\u00e9",
                       "AbortedError")
    line = encode(error).encode()
    stream = b"@@ADRUN-STARTED {\"pid\": 7}\n" + line[:20] + beat + line[20:] + b"@@ADRUN-EXIT {\"returncode\": 1}\n"
    for cut in range(1, len(stream), 7):
        proc = RemoteProcess("node-b", _FakeSession([stream[:cut], stream[cut:]]), Hearing())
        assert [decode(raw.decode().rstrip("\n")) for raw in proc.stderr] == [error], cut
        assert proc.poll() == 1


class _FakeSession(_Channel):
    def makefile(self, mode: str):
        return None


def test_a_node_is_silent_after_silence_s_without_a_byte_and_stays_so(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(remote.time, "monotonic", lambda: now[0])
    hearing = Hearing()
    now[0] += 3 * remote.START_SILENCE_S
    assert hearing.silent_s() is None  # no task yet: nothing to hear
    hearing.expect()
    now[0] += remote.START_SILENCE_S - 1
    assert hearing.silent_s() is None  # a keeper still starting
    hearing.heard()
    now[0] += remote.SILENCE_S
    assert hearing.silent_s() is None
    now[0] += 0.5
    assert hearing.silent_s() == remote.SILENCE_S + 0.5
    hearing.heard()
    assert hearing.silent_s() == remote.SILENCE_S + 0.5  # too late: the job has been failed


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
