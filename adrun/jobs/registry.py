"""The record of the jobs started on this machine: what `adrun jobs`, `adrun stop` and `adrun logs` read.

One SQLite file, `<adrun home>/jobs.sqlite` (adrun/home.py). A launcher adds its job's row before
it starts anything and writes the job's end on its way out, however the job ends (success,
failure, Ctrl-C, `adrun stop`). A launcher killed by SIGKILL cannot write its end: its row still
says running, and the next reader checks the recorded launcher, by pid *and* process start time so
that a reused pid is not taken for it, and records the job as lost.

Every change is one SQL statement or one transaction, so launchers, `adrun stop` and readers can
work at once: a stop request is a flag set only while the job runs, and the end a launcher writes
turns its interrupt into "stopped" when the flag is set. Rows carry the host name and each
machine sees only its own, so a home directory shared between machines (NFS) does not mix them.
"""

from __future__ import annotations

import re
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel

from adrun.errors import UserError
from adrun.exit_codes import INTERRUPTED_EXIT_CODE
from adrun.home import adrun_home, connect_database
from adrun.job_state import JobState

SCHEMA_VERSION = 1
KEPT_ENDED_JOBS = 100  # older ended jobs are forgotten, so the file and `adrun jobs --all` stay small
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SAME_START_S = 0.005  # psutil's start times of one process agree exactly; a reused pid starts later

_COLUMNS = ("id", "host", "state", "command", "cwd", "spec", "script", "nodes", "log_dir", "attempt", "started",
            "ended", "exit_code", "launcher_pid", "launcher_started")
_SCHEMA = (
    "CREATE TABLE jobs (id TEXT PRIMARY KEY, host TEXT NOT NULL, state TEXT NOT NULL, command TEXT NOT NULL,"
    " cwd TEXT NOT NULL, spec TEXT, script TEXT NOT NULL, nodes TEXT NOT NULL, log_dir TEXT,"
    " attempt INTEGER NOT NULL, started REAL NOT NULL, ended REAL, exit_code INTEGER,"
    " launcher_pid INTEGER NOT NULL, launcher_started REAL NOT NULL, stop_requested INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX jobs_by_start ON jobs (host, started)",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)


class JobIdInUse(UserError):
    """A job of the same id is still running: its processes and this job's would be one job to teardown."""


class JobRecord(BaseModel):
    """One job as recorded; `adrun jobs --json` prints a list of these."""

    id: str
    state: JobState
    command: str  # as typed, e.g. `adrun --spec cluster.yml train.py --steps 3`
    cwd: str  # where it was typed
    spec: str | None  # absolute path of the cluster spec; None: the default local cluster
    script: str
    nodes: list[str]  # the spec's node addresses
    log_dir: str | None  # absolute; None: the job ran without --log-dir
    attempt: int = 0  # 0 for the first start of the job; a restart counts up
    started: datetime
    ended: datetime | None = None  # None while running, and for a lost job
    exit_code: int | None = None  # the launcher's exit code
    launcher_pid: int
    launcher_started: float  # the launcher's process start time (psutil), telling a reused pid apart
    host: str  # the machine the launcher ran on

    def launcher(self) -> psutil.Process | None:
        """The launcher process if it still runs (same pid and same start time), else None."""
        try:
            proc = psutil.Process(self.launcher_pid)
            if proc.status() == psutil.STATUS_ZOMBIE or abs(proc.create_time() - self.launcher_started) > _SAME_START_S:
                return None
        except psutil.Error:
            return None
        return proc


def check_job_id(job_id: str) -> str:
    """Refuse a job id that could not name a record, a directory and an environment value alike."""
    if not _JOB_ID.fullmatch(job_id):
        raise UserError(f"--job-id '{job_id}': use 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                        "letter or digit")
    return job_id


def new_record(job_id: str, command: str, *, spec: Path | None, script: Path, nodes: list[str],
               log_dir: Path | None) -> JobRecord:
    """The record of a job this process is about to launch."""
    me = psutil.Process()
    return JobRecord(
        id=job_id, state=JobState.RUNNING, command=command, cwd=str(Path.cwd()),
        spec=str(spec.resolve()) if spec else None, script=str(script), nodes=nodes,
        log_dir=str(log_dir.resolve()) if log_dir else None, started=datetime.now(timezone.utc),
        launcher_pid=me.pid, launcher_started=me.create_time(), host=socket.gethostname(),
    )


class JobStore:
    """The open job record of this machine. Use `open_jobs()` as a context manager."""

    def __init__(self, path: Path, connection: sqlite3.Connection) -> None:
        self.path = path
        self._db = connection
        self._host = socket.gethostname()

    def close(self) -> None:
        self._db.close()

    # --- the launcher's side ------------------------------------------------------------------

    def register(self, record: JobRecord) -> None:
        """Add a running job; refuses an id that names a job still running (its tasks would share
        ADRUN_JOB_ID, by which teardown finds them). An ended job's id may be used again."""
        with self._transaction():
            old = self._get(record.id, any_host=True)
            if old is not None and old.state == JobState.RUNNING and (old.host != self._host or old.launcher()):
                where = f"on {old.host}" if old.host != self._host else f"launcher pid {old.launcher_pid}"
                raise JobIdInUse(f"--job-id '{record.id}': a job of that id is still running ({where}); "
                                "choose another id or stop it with `adrun stop`")
            row = record.model_dump()
            values = [_to_column(name, row[name]) for name in _COLUMNS]
            self._db.execute(f"INSERT OR REPLACE INTO jobs ({', '.join(_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(_COLUMNS))})", values)
            self._db.execute(
                "DELETE FROM jobs WHERE host = ? AND state != 'running' AND id NOT IN (SELECT id FROM jobs "
                "WHERE host = ? AND state != 'running' ORDER BY started DESC LIMIT ?)",
                (self._host, self._host, KEPT_ENDED_JOBS))

    def finish(self, record: JobRecord, state: JobState, exit_code: int) -> None:
        """Write how the launcher's job ended; an interrupt after `request_stop` is "stopped"."""
        self._db.execute(
            "UPDATE jobs SET state = CASE WHEN ? = 'interrupted' AND stop_requested THEN 'stopped' ELSE ? END, "
            "ended = ?, exit_code = ? WHERE id = ? AND launcher_pid = ? AND launcher_started = ?",
            (state, state, time.time(), exit_code, record.id, record.launcher_pid, record.launcher_started))

    def set_attempt(self, record: JobRecord, attempt: int) -> None:
        """The launcher's job was restarted: it now runs attempt `attempt` (ADRUN_RESTART_COUNT)."""
        self._db.execute("UPDATE jobs SET attempt = ? WHERE id = ? AND launcher_pid = ? AND launcher_started = ?",
                         (attempt, record.id, record.launcher_pid, record.launcher_started))

    # --- everyone else's ----------------------------------------------------------------------

    def request_stop(self, job_id: str) -> bool:
        """Mark a running job as asked to stop; False when it is not running any more."""
        cursor = self._db.execute("UPDATE jobs SET stop_requested = 1 WHERE id = ? AND host = ? AND state = 'running'",
                                  (job_id, self._host))
        return cursor.rowcount == 1

    def get(self, job_id: str) -> JobRecord | None:
        """The job of exactly this id on this machine, a dead launcher's job recorded as lost."""
        record = self._get(job_id)
        return self._checked([record])[0] if record is not None else None

    def find(self, id_or_prefix: str) -> JobRecord:
        """The job of this id, or the only one whose id starts with it (as `docker stop` takes ids)."""
        exact = self.get(id_or_prefix)
        if exact is not None:
            return exact
        ids = [row[0] for row in self._db.execute("SELECT id FROM jobs WHERE host = ? ORDER BY started DESC",
                                                   (self._host,))]
        matches = [job_id for job_id in ids if job_id.startswith(id_or_prefix)]
        if not matches:
            raise UserError(f"no job '{id_or_prefix}' on this machine (`adrun jobs --all` lists the recorded ones)")
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise UserError(f"job id prefix '{id_or_prefix}' matches {len(matches)} jobs ({shown}): give more of the id")
        found = self.get(matches[0])
        assert found is not None
        return found

    def jobs(self, include_ended: bool) -> list[JobRecord]:
        """This machine's running jobs (and, with `include_ended`, the ended ones kept), newest first."""
        where = "" if include_ended else " AND state = 'running'"
        rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE host = ?{where} ORDER BY started DESC",
                                (self._host,)).fetchall()
        records = self._checked([_record(row) for row in rows])
        return records if include_ended else [r for r in records if r.state == JobState.RUNNING]

    # --- inside -------------------------------------------------------------------------------

    def _get(self, job_id: str, any_host: bool = False) -> JobRecord | None:
        host = "" if any_host else " AND host = ?"
        row = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE id = ?{host}",
                               (job_id,) if any_host else (job_id, self._host)).fetchone()
        return _record(row) if row else None

    def _checked(self, records: list[JobRecord]) -> list[JobRecord]:
        """`records` with every running job whose launcher is gone recorded (and returned) as lost.
        The update keeps an end the launcher wrote meanwhile: it only touches a row still running."""
        checked = []
        for record in records:
            if record.state == JobState.RUNNING and record.launcher() is None:
                self._db.execute("UPDATE jobs SET state = 'lost' WHERE id = ? AND state = 'running' AND launcher_pid = ? "
                                 "AND launcher_started = ?", (record.id, record.launcher_pid, record.launcher_started))
                record = self._get(record.id) or record
            checked.append(record)
        return checked

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def _to_column(name: str, value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if name == "nodes":
        return "\n".join(value)
    return value


def _record(row: tuple[Any, ...]) -> JobRecord:
    fields = dict(zip(_COLUMNS, row, strict=True))
    fields["nodes"] = fields["nodes"].split("\n") if fields["nodes"] else []
    for name in ("started", "ended"):
        if fields[name] is not None:
            fields[name] = datetime.fromtimestamp(fields[name], timezone.utc)
    return JobRecord(**fields)


@contextmanager
def open_jobs(home: Path | None = None) -> Iterator[JobStore]:
    """The job record under `home` (default: adrun's home), created on first use."""
    path = (home or adrun_home()) / "jobs.sqlite"
    try:
        db = connect_database(path)
    except (OSError, sqlite3.Error) as e:
        raise UserError(f"cannot open the job record {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        _check_schema(db, path)
        store = JobStore(path, db)
        yield store
    except sqlite3.DatabaseError as e:
        raise UserError(f"cannot use the job record {path}: {e} (move the file away to start a new record)") from None
    finally:
        db.close()


def _check_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the table in a new file; refuse a file that is not adrun's job record of this version."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
            for statement in _SCHEMA:
                db.execute(statement)
        elif version != SCHEMA_VERSION:
            raise UserError(f"{path} is not a job record this adrun can read (schema version {version}, "
                            f"expected {SCHEMA_VERSION}): move it away or set ADRUN_HOME")
    finally:
        if db.in_transaction:
            db.execute("COMMIT")


class LauncherRecord:
    """The running launcher's own row: added by `open`, ended by `close`, whatever ends the job.

    Each step raises what must stop the launcher (a job of the same id still running) and returns
    any other problem as its message (None when there is none): an unusable record must not cost
    the user the job itself, and what to show, and how, is the CLI's (adrun/cli/job_record.py,
    which also makes SIGTERM interrupt the launcher meanwhile). The exit status is read from how
    the job's block ended (`sys.exit(code)`, a user error, an interrupt); the CLI names the state
    with `ended()` when a supervised job tells more than its exit code.
    """

    def __init__(self, record: JobRecord, home: Path | None = None) -> None:
        self.record = record
        self._home = home
        self._end: tuple[JobState, int] | None = None
        self._recorded = False

    def open(self) -> str | None:
        """Add the job's row; raises JobIdInUse, returns why the job is not recorded otherwise."""
        try:
            with open_jobs(self._home) as store:
                store.register(self.record)
        except JobIdInUse:
            raise
        except UserError as e:
            return f"{e}; this job is not recorded, so `adrun jobs`, `stop` and `logs` will not know it"
        self._recorded = True
        return None

    def ended(self, state: JobState, exit_code: int) -> None:
        """How the job ended, when the CLI knows better than the block's exit (an interrupted job
        and a task killed by SIGINT both exit 130)."""
        self._end = (state, exit_code)

    def attempt_started(self, attempt: int) -> str | None:
        """Record which attempt the job runs now (`adrun jobs` shows it); returns why it could not."""
        if not self._recorded or attempt == 0:  # attempt 0 is registered with the job
            return None
        try:
            with open_jobs(self._home) as store:
                store.set_attempt(self.record, attempt)
        except UserError as e:
            return f"could not record attempt {attempt} of job {self.record.id}: {e}"
        return None

    def close(self, exc: BaseException | None) -> str | None:
        """Write the job's end, read from `exc` (what ended its block; None: it ended normally)
        unless `ended` said it; returns why it could not (`adrun jobs` will then show it as lost)."""
        if not self._recorded:
            return None
        state, exit_code = self._end or how_it_ended(exc)
        try:
            with open_jobs(self._home) as store:
                store.finish(self.record, state, exit_code)
        except UserError as e:
            return f"could not record the end of job {self.record.id}: {e}"
        return None


def how_it_ended(exc: BaseException | None) -> tuple[JobState, int]:
    """The job's state and the launcher's exit code for a block that ended with `exc`."""
    if exc is None:
        return JobState.SUCCEEDED, 0
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return (JobState.SUCCEEDED if code == 0 else JobState.FAILED), code
    if isinstance(exc, KeyboardInterrupt):
        return JobState.INTERRUPTED, INTERRUPTED_EXIT_CODE
    if isinstance(exc, UserError):
        return JobState.FAILED, exc.exit_code
    return JobState.FAILED, 1
