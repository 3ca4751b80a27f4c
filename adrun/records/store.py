"""The local records database: finished runs (TrialRecords) and the facts they were planned on.

One SQLite file (default `records.sqlite` in adrun's home, `~/.adrun/`; `ADRUN_RECORDS` or `--records PATH` name
another) keeps

- every recorded run as a `TrialRecord` (strategies/facts.py), the data the cost model is fitted on;
- the latest `ModelProfile` per graph fingerprint and batch size, so that a plain run of a graph
  that `adrun profile` profiled earlier is recorded with that profile;
- the latest `NetworkFacts` per cluster (`cluster_key`), so later runs on the same hosts reuse them;
- the plans a profiling builder (Auto) made, per `plan_key` (graph, cluster, network facts, builder
  and options, adrun version), so that starting the same script on the same cluster again skips the
  profiling (adrun/cli/planning.py).

Schema version 2 added the plans table; a version 1 file is migrated on opening (the table added).

Records are stored as their JSON documents, so the table layout does not follow every field of
facts.py; `meta` names the file as adrun's and carries the schema version. Several adrun runs may
write at once: every write is one transaction, and a writer waits up to `adrun.home.BUSY_TIMEOUT_S` for
another's lock instead of failing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from adrun.errors import UserError
from adrun.home import adrun_home, connect_database
from adrun.spec import ClusterSpec
from adrun.strategies.document import Strategy
from adrun.strategies.facts import ModelProfile, NetworkFacts, TrialRecord

RECORDS_ENV = "ADRUN_RECORDS"
RECORDS_FILE = "records.sqlite"  # in adrun's home directory (adrun/home.py)
SCHEMA_NAME = "adrun-records"
SCHEMA_VERSION = 2
_NO_BATCH = -1  # the batch-size key of a profile whose batch size capture could not read
_M = TypeVar("_M", bound=BaseModel)
CANTOPEN_TEXT = "unable to open database file"  # sqlite3_errstr(SQLITE_CANTOPEN)

_PLANS_TABLE = "CREATE TABLE IF NOT EXISTS plans (key TEXT PRIMARY KEY, plan TEXT NOT NULL)"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS trials (id INTEGER PRIMARY KEY AUTOINCREMENT, cluster_key TEXT NOT NULL,"
    " recorded_at TEXT NOT NULL, workload TEXT NOT NULL, builder TEXT NOT NULL, record TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS trials_by_cluster ON trials (cluster_key, id)",
    "CREATE TABLE IF NOT EXISTS profiles (fingerprint TEXT NOT NULL, batch_size INTEGER NOT NULL,"
    " profile TEXT NOT NULL, PRIMARY KEY (fingerprint, batch_size))",
    "CREATE TABLE IF NOT EXISTS networks (cluster_key TEXT PRIMARY KEY, facts TEXT NOT NULL)",
    _PLANS_TABLE,
)
# schema version -> the statements that bring a file of that version to the next one
_MIGRATIONS = {1: (_PLANS_TABLE,)}


def records_path(option: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Where the records live: `--records PATH`, else `ADRUN_RECORDS`, else records.sqlite in
    adrun's home directory (`ADRUN_HOME`, default ~/.adrun)."""
    env = os.environ if env is None else env
    chosen = option or env.get(RECORDS_ENV)
    return Path(chosen).expanduser() if chosen else adrun_home(env) / RECORDS_FILE


def cluster_key(spec: ClusterSpec) -> str:
    """A readable key that is the same for every spec of the same hosts with the same task counts:
    `host:<workers>w<ps>ps` per node (`*` marks the chief, `+<n>gpu` GPUs), sorted by address, so
    the order of `nodes` in the file, ports, SSH or env settings do not split a cluster's records."""
    parts = []
    for node in sorted(spec.nodes, key=lambda n: n.address):
        part = f"{node.address}{'*' if node is spec.chief else ''}:{node.workers}w{node.ps}ps"
        if node.gpus:
            part += f"+{node.gpus}gpu"
        parts.append(part)
    return ",".join(parts)


def plan_key(fingerprint: str, cluster: str, network: NetworkFacts, builder: str,
             options: Mapping[str, object]) -> str:
    """The key a plan is remembered by: what it was planned from, beyond the records' fit: the graph,
    the cluster (`cluster_key`), its network facts, the builder with its options, and this adrun's
    version (another version may plan otherwise). A hash: the network facts make a long text."""
    from adrun import __version__

    text = json.dumps([fingerprint, cluster, network.model_dump(mode="json"), builder, dict(options), __version__],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Records:
    """An open records database. Use `open_records`; close it (or use it as a context manager)."""

    def __init__(self, path: Path, connection: sqlite3.Connection) -> None:
        self.path = path
        self._db = connection

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def add_trial(self, record: TrialRecord) -> int:
        """Store `record`; returns its trial number (1, 2, ... in the order runs were recorded)."""
        with self._writing() as db:
            cursor = db.execute(
                "INSERT INTO trials (cluster_key, recorded_at, workload, builder, record) VALUES (?, ?, ?, ?, ?)",
                (record.cluster_key, record.recorded_at, record.workload, record.strategy.builder,
                 record.model_dump_json()),
            )
            assert cursor.lastrowid is not None  # set by every INSERT into a rowid table
            return cursor.lastrowid

    def trials(self, cluster_key: str) -> list[TrialRecord]:
        """Every recorded run on the cluster `cluster_key`, oldest first."""
        rows = self._reading("SELECT id, record FROM trials WHERE cluster_key = ? ORDER BY id", (cluster_key,))
        return [self._parse(TrialRecord, text, f"trial {number}") for number, text in rows]

    def save_profile(self, profile: ModelProfile) -> None:
        """Keep `profile` as the latest one of its graph and batch size."""
        with self._writing() as db:
            db.execute("INSERT OR REPLACE INTO profiles (fingerprint, batch_size, profile) VALUES (?, ?, ?)",
                       (profile.graph.fingerprint, _batch_key(profile.batch_size), profile.model_dump_json()))

    def profile_for(self, fingerprint: str, batch_size: int | None) -> ModelProfile | None:
        """The latest profile of the graph `fingerprint` at `batch_size`, if one was saved."""
        rows = self._reading("SELECT profile FROM profiles WHERE fingerprint = ? AND batch_size = ?",
                             (fingerprint, _batch_key(batch_size)))
        return self._parse(ModelProfile, rows[0][0], f"the profile of graph {fingerprint[:12]}") if rows else None

    def save_network(self, cluster_key: str, facts: NetworkFacts) -> None:
        """Keep `facts` as the latest network facts of the cluster `cluster_key`."""
        with self._writing() as db:
            db.execute("INSERT OR REPLACE INTO networks (cluster_key, facts) VALUES (?, ?)",
                       (cluster_key, facts.model_dump_json()))

    def network_for(self, cluster_key: str) -> NetworkFacts | None:
        """The latest network facts of the cluster `cluster_key`, if any were saved."""
        rows = self._reading("SELECT facts FROM networks WHERE cluster_key = ?", (cluster_key,))
        return self._parse(NetworkFacts, rows[0][0], f"the network facts of {cluster_key}") if rows else None

    def save_plan(self, key: str, plan: Strategy) -> None:
        """Remember `plan` under `key` (`plan_key`)."""
        with self._writing() as db:
            db.execute("INSERT OR REPLACE INTO plans (key, plan) VALUES (?, ?)", (key, plan.model_dump_json()))

    def plan_for(self, key: str) -> Strategy | None:
        """The plan remembered under `key`, if any."""
        rows = self._reading("SELECT plan FROM plans WHERE key = ?", (key,))
        return self._parse(Strategy, rows[0][0], f"the plan remembered as {key[:12]}") if rows else None

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE) so that concurrent writers queue
        on the busy timeout rather than fail on a lock upgrade."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as e:
            raise UserError(f"records database {self.path}: cannot write: {e}") from None

    def _reading(self, sql: str, params: tuple) -> list[tuple]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise _unusable(self.path, str(e)) from None

    def _parse(self, model: type[_M], text: str, what: str) -> _M:
        try:
            return model.model_validate_json(text)
        except ValidationError as e:
            raise _unusable(self.path, f"{what} does not read as this adrun's record "
                                       f"({e.error_count()} problem(s), first: {e.errors()[0]['msg']})") from None


def _batch_key(batch_size: int | None) -> int:
    return _NO_BATCH if batch_size is None else batch_size


def _unusable(path: Path, why: str) -> UserError:
    return UserError(f"records database {path} cannot be used: {why}. Move the file away (adrun starts a new "
                     f"one there), point {RECORDS_ENV} or --records elsewhere, or run with --no-record")


def cannot_open(e: sqlite3.Error) -> bool:
    """Whether `e` is SQLITE_CANTOPEN: a directory, or no permission to read or create the file.
    `sqlite_errorname` is Python 3.11+ and set only on errors SQLite raised; without it, SQLite's
    fixed text for the code tells."""
    name = getattr(e, "sqlite_errorname", None)
    return name == "SQLITE_CANTOPEN" if name is not None else str(e) == CANTOPEN_TEXT


def _unopenable(path: Path, why: str) -> UserError:
    return UserError(f"records database {path} cannot be opened: {why}. Point {RECORDS_ENV} or --records at a "
                     "file in a writable directory, or run with --no-record")


def open_records(path: Path) -> Records:
    """Open (creating it and its directory when missing, owner-only) the records database at `path`.

    Raises UserError naming the file when it cannot be opened, is no SQLite database, is some
    other program's database, or was written by a newer adrun.
    """
    try:
        db = connect_database(path)
    except OSError as e:
        raise _unopenable(path, f"{e.strerror or e}{f' ({e.filename})' if e.filename else ''}") from None
    except sqlite3.Error as e:
        raise _unopenable(path, str(e)) from None
    try:
        _check_or_create_schema(db, path)
    except BaseException:
        db.close()
        raise
    return Records(path, db)


def _check_or_create_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the tables in an empty file; otherwise check the file is adrun's records of a schema
    this adrun reads. Done in one write transaction so two runs creating the file at once agree."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                for statement in _SCHEMA:
                    db.execute(statement)
                db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                               [("schema", SCHEMA_NAME), ("version", str(SCHEMA_VERSION))])
            elif "meta" in tables:
                _migrate(db)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    except sqlite3.Error as e:
        if cannot_open(e):
            raise _unopenable(path, str(e)) from None
        raise _unusable(path, f"it is not a readable SQLite database ({e})") from None
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error:
        meta = {}  # no such table or columns: some other program's database
    if meta.get("schema") != SCHEMA_NAME:
        raise _unusable(path, "it is an SQLite database, but not adrun's records")
    version = meta.get("version", "")
    if version != str(SCHEMA_VERSION):
        raise _unusable(path, f"its schema version {version or '(none)'} is not {SCHEMA_VERSION}, the one this "
                              "adrun reads (written by another adrun version)")


def _migrate(db: sqlite3.Connection) -> None:
    """Bring adrun's records of an older schema version to this one, inside the caller's
    transaction; any other file is left as it is for the checks that follow to name."""
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("schema") != SCHEMA_NAME:
        return
    version = meta.get("version", "")
    while version.isdigit() and int(version) in _MIGRATIONS:
        for statement in _MIGRATIONS[int(version)]:
            db.execute(statement)
        version = str(int(version) + 1)
        db.execute("UPDATE meta SET value = ? WHERE key = 'version'", (version,))
