"""Files adrun writes are the user's alone: private run directories (here and on every node),
owner-only databases, and --sync-code sending nothing from outside the script's directory.

"Another user" is simulated by making the process's effective uid look different
(`os.geteuid` patched), so the refusals are tested without root and without a second account.

At the root of tests/unit: the rule spans adrun/ (home, jobs, records) and launch/ (the node helper, provisioning).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from adrun import home
from adrun.errors import UserError
from adrun.jobs.registry import open_jobs
from adrun.launch.job import provision, remote_agent
from adrun.launch.nodes import node_tools
from adrun.records.store import open_records


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_missing_directories_are_created_for_the_user_alone(tmp_path):
    target = tmp_path / "runs" / "job-1"
    assert node_tools.private_dir(str(target)) is None
    assert mode(tmp_path / "runs") == 0o700 and mode(target) == 0o700


def test_an_own_directory_left_open_is_tightened(tmp_path):
    target = tmp_path / "runs"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    assert node_tools.private_dir(str(target)) is None
    assert mode(target) == 0o700


def test_a_directory_someone_else_owns_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "runs"
    target.mkdir()
    os.chmod(target, 0o755)
    owner = target.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1000)
    problem = node_tools.private_dir(str(target))
    assert problem is not None and str(target) in problem and f"uid {owner}, not to you (uid {owner + 1000})" in problem
    assert mode(target) == 0o755  # left as it is: not ours to change


def test_a_directory_under_one_anybody_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # not sticky: anyone could rename our directory away and put theirs there
    problem = node_tools.private_dir(str(shared / "runs"))
    assert problem is not None and f"{shared} belongs to uid" in problem and "mode 777" in problem
    os.chmod(shared, 0o1777)  # sticky, as /tmp: only the owner may rename or remove its entries
    assert node_tools.private_dir(str(shared / "runs")) is None


def test_a_planted_link_leads_to_a_refused_directory(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "runs").symlink_to(open_dir)
    (open_dir / "job").mkdir()
    problem = node_tools.private_dir(str(sticky / "runs" / "job"))
    assert problem is not None and str(open_dir) in problem


def test_run_dir_is_per_user_and_private(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = home.run_dir("job-7")
    assert path == tmp_path / f"adrun-runs-{os.geteuid()}" / "job-7"
    assert mode(path.parent) == 0o700 and mode(path) == 0o700
    uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1000)
    (tmp_path / f"adrun-runs-{uid + 1000}").mkdir()  # created first by "someone else" (us, really)
    with pytest.raises(UserError, match=rf"run directory refused: {tmp_path}/adrun-runs-{uid + 1000} belongs to "
                                        rf"uid {uid}, not to you \(uid {uid + 1000}\)"):
        home.run_dir("job-8")
    assert not (tmp_path / f"adrun-runs-{uid + 1000}" / "job-8").exists()


def test_the_node_helper_refuses_a_run_directory_someone_else_owns(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    args = {"ports": {"base": None, "count": 0}, "files": [], "private_dir": str(tmp_path / "runs" / "job")}
    assert remote_agent.prepare(args)["private_dir"] is None and mode(tmp_path / "runs" / "job") == 0o700
    owner = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1000)
    assert f"uid {owner}, not to you" in remote_agent.prepare(args)["private_dir"]


def test_databases_are_the_owners_alone(tmp_path, monkeypatch):
    adrun_home = tmp_path / "home"
    monkeypatch.setenv("ADRUN_HOME", str(adrun_home))
    with open_jobs():
        pass
    with open_records(tmp_path / "elsewhere" / "records.sqlite"):
        pass
    assert mode(adrun_home) == 0o700 and mode(adrun_home / "jobs.sqlite") == 0o600
    assert mode(tmp_path / "elsewhere") == 0o700 and mode(tmp_path / "elsewhere" / "records.sqlite") == 0o600


def test_databases_written_before_are_tightened(tmp_path, monkeypatch):
    """~/.adrun and its files as an earlier adrun left them: world-readable."""
    adrun_home = tmp_path / "home"
    adrun_home.mkdir()
    os.chmod(adrun_home, 0o755)
    monkeypatch.setenv("ADRUN_HOME", str(adrun_home))
    with open_jobs():
        pass
    os.chmod(adrun_home / "jobs.sqlite", 0o644)
    with open_jobs():
        pass
    assert mode(adrun_home) == 0o700 and mode(adrun_home / "jobs.sqlite") == 0o600


def test_sync_code_refuses_a_link_leading_outside_the_scripts_directory(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("x = 1\n")
    (code / "data.txt").write_text("rows\n")
    (code / "same.txt").symlink_to(code / "data.txt")  # inside: copied as the file it names
    assert sorted(f.name for f in provision.sync_files(code / "train.py")) == ["data.txt", "same.txt", "train.py"]
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY\n")
    (code / "key").symlink_to(secret)
    with pytest.raises(UserError, match=rf"--sync-code: {code}/key is a symbolic link to {secret}, outside {code}"):
        provision.sync_files(code / "train.py")


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a directory of another user (chown needs root)")
def test_a_run_refuses_a_run_directory_someone_else_created_before_anything_starts(tmp_path):
    from tests.support.adrun_cli import run_adrun
    from tests.support.paths import SCRIPTS
    from adrun.launch.job.teardown import leftover_processes

    planted = tmp_path / f"adrun-runs-{os.geteuid()}"
    planted.mkdir(mode=0o777)
    os.chown(planted, 65534, 65534)  # nobody got there first
    result = run_adrun("--strategy", "PSLoadBalancing", str(SCRIPTS / "tiny_model.py"), env={"TMPDIR": str(tmp_path)})
    assert result.returncode == 2, result.output
    assert (f"adrun: error: run directory refused: {planted} belongs to uid 65534, not to you (uid 0)"
            in " ".join(result.stderr.split()))
    assert list(planted.iterdir()) == [] and leftover_processes(result.job_id) == []
