"""The record of jobs on this machine (adrun/jobs/registry.py) and reading their logs (adrun/jobs/logs.py),
without starting a job: the launcher is this test process, or a process that has ended."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import psutil
import pytest

from adrun.jobs import registry as jobs
from adrun.errors import UserError
from adrun.jobs.control import LostJob, stop_job
from adrun.jobs.logs import show_logs
from adrun.cli.interrupts import handling_interrupts
from adrun.cli.job_record import recorded_job
from adrun.jobs.registry import JobRecord, LauncherRecord, check_job_id, new_record, open_jobs

pytestmark = pytest.mark.timeout(60)


def record(job_id: str, log_dir: Path | None = None, **fields) -> JobRecord:
    """A running job launched by this process, unless `fields` say otherwise."""
    made = new_record(job_id, f"adrun --job-id {job_id} train.py", spec=None, script=Path("train.py"),
                      nodes=["localhost"], log_dir=log_dir)
    return made.model_copy(update=fields)


def ended_process() -> tuple[int, float]:
    """The pid and start time of a process that has ended (and been reaped)."""
    proc = psutil.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    started = proc.create_time()
    proc.wait()
    return proc.pid, started


def test_a_job_round_trips_and_ends_with_the_launchers_state(tmp_path):
    with open_jobs(tmp_path) as store:
        job = record("j1", log_dir=tmp_path / "logs")
        store.register(job)
        [running] = store.jobs(include_ended=False)
        assert running == job
        store.finish(job, "failed", 3)
        assert store.jobs(include_ended=False) == []
        [ended] = store.jobs(include_ended=True)
    assert (ended.state, ended.exit_code, ended.log_dir) == ("failed", 3, str(tmp_path / "logs"))
    assert ended.ended is not None and ended.ended >= ended.started


def test_an_interrupt_after_a_stop_request_is_recorded_as_stopped(tmp_path):
    with open_jobs(tmp_path) as store:
        asked, not_asked = record("asked"), record("not-asked")
        store.register(asked)
        store.register(not_asked)
        assert store.request_stop("asked")
        store.finish(asked, "interrupted", 130)
        store.finish(not_asked, "interrupted", 130)
        assert not store.request_stop("asked")  # ended: nothing to ask any more
        assert store.get("asked").state == "stopped"
        assert store.get("not-asked").state == "interrupted"


def test_a_dead_or_reused_launcher_pid_makes_the_job_lost(tmp_path):
    pid, started = ended_process()
    me = psutil.Process()
    with open_jobs(tmp_path) as store:
        store.register(record("gone", launcher_pid=pid, launcher_started=started))
        # This process's pid, but started earlier than this process: a pid the kernel handed on.
        store.register(record("reused", launcher_pid=me.pid, launcher_started=me.create_time() - 60))
        store.register(record("alive"))
        states = {job.id: job.state for job in store.jobs(include_ended=True)}
        assert states == {"gone": "lost", "reused": "lost", "alive": "running"}
        assert [job.id for job in store.jobs(include_ended=False)] == ["alive"]
        with pytest.raises(LostJob):
            stop_job(store, store.get("gone"))


def test_a_running_id_is_refused_and_an_ended_one_reused(tmp_path):
    with open_jobs(tmp_path) as store:
        first = record("same")
        store.register(first)
        with pytest.raises(UserError, match=r"--job-id 'same': a job of that id is still running "
                                            rf"\(launcher pid {os.getpid()}\)"):
            store.register(record("same"))
        store.finish(first, "succeeded", 0)
        store.register(record("same"))
        assert store.get("same").state == "running"


def test_ids_and_prefixes(tmp_path):
    with open_jobs(tmp_path) as store:
        for job_id in ("20261122-101010-abc", "20261122-101010-abd", "other"):
            store.register(record(job_id))
        assert store.find("oth").id == "other"
        assert store.find("20261122-101010-abc").id == "20261122-101010-abc"
        with pytest.raises(UserError, match=r"^job id prefix '20261122' matches 2 jobs \(20261122-101010-ab[cd], "
                                            r"20261122-101010-ab[cd]\): give more of the id$"):
            store.find("20261122")
        with pytest.raises(UserError, match=r"^no job 'OTHER' on this machine \(`adrun jobs --all` lists"):
            store.find("OTHER")
        with pytest.raises(UserError, match="job other is not running: it ended succeeded at .* UTC; nothing to stop"):
            store.finish(store.get("other"), "succeeded", 0)
            stop_job(store, store.get("other"))
    assert check_job_id("a.b_c-1") == "a.b_c-1"
    for bad in ("../x", "-x", "a b", "x" * 65, ""):
        with pytest.raises(UserError, match=r"^--job-id '.*': use 1 to 64 letters"):
            check_job_id(bad)


def test_only_the_latest_ended_jobs_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "KEPT_ENDED_JOBS", 2)
    with open_jobs(tmp_path) as store:
        for i in range(4):
            job = record(f"j{i}")
            store.register(job)
            store.finish(job, "succeeded", 0)
        store.register(record("running"))
        assert [job.id for job in store.jobs(include_ended=True)] == ["running", "j3", "j2"]


def test_a_file_that_is_no_job_record_is_named(tmp_path):
    (tmp_path / "jobs.sqlite").write_text("not a database, just text\n" * 100)
    with pytest.raises(UserError, match=rf"^cannot use the job record {tmp_path}/jobs.sqlite: file is not a database"):
        with open_jobs(tmp_path) as store:
            store.jobs(include_ended=True)


def test_sigterm_interrupts_the_launcher_block_and_is_recorded(tmp_path):
    """What `adrun stop` sends to a launcher that is not supervising yet (capturing, connecting)."""
    job = record("stopped-early")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with handling_interrupts(), recorded_job(job, home=tmp_path):
            with open_jobs(tmp_path) as store:
                assert store.request_stop(job.id)
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(10)  # the handler raises here
    assert signal.getsignal(signal.SIGTERM) is before  # restored
    with open_jobs(tmp_path) as store:
        ended = store.get(job.id)
    assert (ended.state, ended.exit_code) == ("stopped", 130)


def test_the_launcher_block_records_how_it_exits(tmp_path):
    for job_id, exit_with, expected in (("ok", SystemExit(0), ("succeeded", 0)),
                                        ("task-failed", SystemExit(137), ("failed", 137)),
                                        ("user-error", UserError("bad spec"), ("failed", 2))):
        with pytest.raises(type(exit_with)):
            with recorded_job(record(job_id), home=tmp_path):
                raise exit_with
    with pytest.raises(SystemExit):
        with recorded_job(record("interrupted"), home=tmp_path) as recorded:
            recorded.ended("interrupted", 130)
            raise SystemExit(130)
    with open_jobs(tmp_path) as store:
        states = {job.id: (job.state, job.exit_code) for job in store.jobs(include_ended=True)}
    assert states == {"ok": ("succeeded", 0), "task-failed": ("failed", 137), "user-error": ("failed", 2),
                      "interrupted": ("interrupted", 130)}


# --- logs --------------------------------------------------------------------------------------------


def test_logs_show_each_task_file_prefixed_workers_first(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "w1@10.0.0.2.log").write_text("w1 one\nw1 two\n")  # a task on another node: its label
    (logs / "ps0.log").write_text("serving\n")
    (logs / "w0.log").write_text("w0 one\nno newline at the end")
    (logs / "result.json").write_text("{}")
    (logs / "w2.log").write_text("a file of an earlier job\n")
    os.utime(logs / "w2.log", (0, 0))
    lines: list[str] = []
    show_logs(record("j", log_dir=logs), lambda tag, line: lines.append(f"[{tag}] {line}"))
    assert lines == ["[w0] w0 one", "[w0] no newline at the end", "[w1@10.0.0.2] w1 one", "[w1@10.0.0.2] w1 two",
                     "[ps0] serving"]


def test_logs_follow_until_the_job_ends(tmp_path):
    """Lines written while following, including a file that appears later and a last line without
    its newline, are all shown once; following ends when the job is no longer running."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "w0.log").write_text("first\n")
    lines: list[str] = []
    seen_first = threading.Event()
    running = threading.Event()
    running.set()

    def emit(tag: str, line: str) -> None:
        lines.append(f"[{tag}] {line}")
        seen_first.set()

    follower = threading.Thread(target=show_logs, args=(record("j", log_dir=logs), emit),
                                kwargs={"follow": True, "still_running": running.is_set})
    follower.start()
    assert seen_first.wait(30)
    with open(logs / "w0.log", "a") as w0, open(logs / "ps0.log", "w") as ps0:
        w0.write("second\nhalf")
        w0.flush()
        ps0.write("serving\n")
        ps0.flush()
        w0.write(" and the rest\nlast words")
    running.clear()
    follower.join(30)
    assert not follower.is_alive()
    # Files are read in turn, so the two tasks' lines may interleave; each task's keep their order.
    assert [line for line in lines if line.startswith("[w0]")] == [
        "[w0] first", "[w0] second", "[w0] half and the rest", "[w0] last words"]
    assert [line for line in lines if line.startswith("[ps0]")] == ["[ps0] serving"]
    assert len(lines) == 5


def test_logs_of_a_job_without_log_dir(tmp_path):
    with pytest.raises(UserError, match=r"^job j ran without --log-dir: its output went only to the terminal"):
        show_logs(record("j"), lambda tag, line: None)
    with pytest.raises(UserError, match=rf"^job j: its log dir {tmp_path}/gone no longer exists$"):
        show_logs(record("j", log_dir=tmp_path / "gone"), lambda tag, line: None)


def test_an_unusable_record_costs_a_warning_not_the_job(tmp_path, capsys):
    (tmp_path / "jobs.sqlite").write_text("not a database, just text\n" * 100)
    ran = False
    with recorded_job(record("unrecorded"), home=tmp_path):
        ran = True
    assert ran
    err = capsys.readouterr().err
    assert err.startswith(f"adrun: warning: cannot use the job record {tmp_path}/jobs.sqlite: file is not a database")
    assert "this job is not recorded, so `adrun jobs`, `stop` and `logs` will not know it" in err
    # A running job of the same id is a different matter: the two would share ADRUN_JOB_ID.
    home = tmp_path / "home"
    with recorded_job(record("twice"), home=home):
        with pytest.raises(UserError, match="a job of that id is still running"):
            with recorded_job(record("twice"), home=home):
                pass


def test_a_restarted_job_shows_the_attempt_it_runs(tmp_path):
    job = record("restarted")
    with recorded_job(job, tmp_path) as launcher:
        launcher.attempt_started(0)
        launcher.attempt_started(2)
        with open_jobs(tmp_path) as store:
            assert (store.get("restarted").state, store.get("restarted").attempt) == ("running", 2)
    with open_jobs(tmp_path) as store:
        assert store.get("restarted").attempt == 2


def test_the_record_returns_its_problems_and_shows_nothing(tmp_path, capsys):
    """The store is data: the CLI decides what a problem costs and shows it (adrun/cli/job_record.py)."""
    (tmp_path / "jobs.sqlite").write_text("not a database, just text\n" * 100)
    launcher = LauncherRecord(record("quiet"), home=tmp_path)
    problem = launcher.open()
    assert problem.startswith(f"cannot use the job record {tmp_path}/jobs.sqlite: file is not a database")
    assert launcher.attempt_started(2) is None and launcher.close(None) is None  # nothing recorded: nothing to write
    assert capsys.readouterr() == ("", "")
