"""The records database (adrun/records/store.py): round trips, keys, refusals of files it cannot use."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.records.store import (
    CANTOPEN_TEXT, RECORDS_ENV, SCHEMA_VERSION, cannot_open, cluster_key, open_records, records_path,
)
from adrun.spec import ClusterSpec, Node
from adrun.strategies import build_strategy
from adrun.strategies.facts import Link, NodeBytes, TrialRecord
from tests.support.record_facts import item, network, profile, two_hosts


def trial(spec: ClusterSpec, builder: str = "PSLoadBalancing", rate: float = 12.5, **fields) -> TrialRecord:
    graph = item()
    return TrialRecord(
        recorded_at="2026-11-22T23:00:00+00:00", cluster_key=cluster_key(spec), workload="train.py --epochs 1",
        spec=spec, strategy=build_strategy(builder, graph, spec), steps_per_s=rate, examples_per_s=rate * 128,
        node_bytes={"10.0.0.1": NodeBytes(sent=1e6, received=2e6), "10.0.0.2": NodeBytes(sent=2e6, received=1e6)},
        **fields,
    )


def test_trials_round_trip_in_order_and_by_cluster(tmp_path: Path) -> None:
    spec = two_hosts()
    other = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=1)])
    first = trial(spec, profile=profile(item()), network=network())
    second = trial(spec, "AllReduce", rate=20.0)
    elsewhere = trial(other, "PS")
    with open_records(tmp_path / "r.sqlite") as records:
        numbers = [records.add_trial(t) for t in (first, elsewhere, second)]
        assert numbers == [1, 2, 3]
        assert records.trials(cluster_key(spec)) == [first, second]
        assert records.trials(cluster_key(other)) == [elsewhere]
        assert records.trials("nowhere:1w0ps") == []
    with open_records(tmp_path / "r.sqlite") as reopened:  # the file keeps them
        assert reopened.trials(cluster_key(spec)) == [first, second]


def test_latest_profile_per_fingerprint_and_batch_size(tmp_path: Path) -> None:
    with open_records(tmp_path / "r.sqlite") as records:
        assert records.profile_for(item().fingerprint, 32) is None
        records.save_profile(profile(item(32), compute_s=0.5))
        records.save_profile(profile(item(32), compute_s=0.25))  # a later profile replaces it
        records.save_profile(profile(item(64), compute_s=0.75))
        records.save_profile(profile(item(None), compute_s=0.125))
        assert records.profile_for(item().fingerprint, 32) == profile(item(32), compute_s=0.25)
        assert records.profile_for(item().fingerprint, 64).compute_s == 0.75
        assert records.profile_for(item().fingerprint, None).compute_s == 0.125
        assert records.profile_for(item(width=11).fingerprint, 32) is None  # another graph


def test_latest_network_per_cluster(tmp_path: Path) -> None:
    with open_records(tmp_path / "r.sqlite") as records:
        key = cluster_key(two_hosts())
        assert records.network_for(key) is None
        records.save_network(key, network())
        faster = network().model_copy(update={"local": Link(bytes_per_s=9e9, latency_s=1e-5, source="measured")})
        records.save_network(key, faster)
        assert records.network_for(key) == faster
        assert records.network_for("localhost*:2w1ps") is None


def test_cluster_key_ignores_node_order_ports_and_ssh_but_not_task_counts() -> None:
    a = ClusterSpec(version=1, nodes=[Node(address="10.0.0.2", workers=1, ps=1),
                                      Node(address="10.0.0.1", chief=True, workers=2, ps=0)])
    b = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=2, ps=0, base_port=24000),
                                      Node(address="10.0.0.2", workers=1, ps=1, env={"X": "1"})])
    assert cluster_key(a) == cluster_key(b) == "10.0.0.1*:2w0ps,10.0.0.2:1w1ps"
    more = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=2, ps=0),
                                         Node(address="10.0.0.2", workers=2, ps=1)])
    assert cluster_key(more) != cluster_key(a)
    chief_moved = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", workers=2, ps=0),
                                                Node(address="10.0.0.2", chief=True, workers=1, ps=1)])
    assert cluster_key(chief_moved) != cluster_key(a)


def test_records_path_option_then_env_then_home(tmp_path: Path) -> None:
    assert records_path(str(tmp_path / "opt.sqlite"), {RECORDS_ENV: "/x/env.sqlite"}) == tmp_path / "opt.sqlite"
    assert records_path(None, {RECORDS_ENV: "/x/env.sqlite"}) == Path("/x/env.sqlite")
    assert records_path(None, {}) == Path.home() / ".adrun" / "records.sqlite"
    assert records_path(None, {"ADRUN_HOME": str(tmp_path)}) == tmp_path / "records.sqlite"


def test_a_file_that_is_no_database_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "records.sqlite"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(UserError) as e:
        open_records(path)
    message = str(e.value)
    assert str(path) in message and "not a readable SQLite database" in message
    assert "Move the file away" in message and "--no-record" in message
    assert path.read_bytes().startswith(b"these are my notes")  # left as it was


def test_another_programs_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "records.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE songs (title TEXT)")
    with pytest.raises(UserError, match=r"records\.sqlite cannot be used: it is an SQLite database, but not adrun's"):
        open_records(path)
    with sqlite3.connect(path) as db:
        assert [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["songs"]


def test_records_of_another_schema_version_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "records.sqlite"
    open_records(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(UserError, match=f"its schema version {SCHEMA_VERSION + 1} is not {SCHEMA_VERSION}"):
        open_records(path)


def test_a_damaged_record_is_reported_not_raised_as_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "records.sqlite"
    with open_records(path) as records:
        records.add_trial(trial(two_hosts()))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE trials SET record = '{\"version\": 7}'")
    with open_records(path) as records, pytest.raises(UserError, match="trial 1 does not read as this adrun's record"):
        records.trials(cluster_key(two_hosts()))


def test_concurrent_writers_lose_no_record(tmp_path: Path) -> None:
    """Four connections adding at once (as four adrun runs finishing together would): every record
    lands, each under its own number."""
    path = tmp_path / "records.sqlite"
    spec = two_hosts()
    numbers: list[int] = []
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            with open_records(path) as records:
                for i in range(10):
                    numbers.append(records.add_trial(trial(spec, rate=float(1 + k * 10 + i))))
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(numbers) == list(range(1, 41))
    with open_records(path) as records:
        assert sorted(t.steps_per_s for t in records.trials(cluster_key(spec))) == [float(r) for r in range(1, 41)]


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_a_path_that_cannot_be_opened_says_where_to_point_instead(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    path = tmp_path if where == "a directory" else blocker / "records.sqlite"
    with pytest.raises(UserError) as e:
        open_records(path)
    message = str(e.value)
    assert message.startswith(f"records database {path} cannot be opened: ")
    assert "writable directory" in message and "--no-record" in message and "Move the file" not in message


def test_a_database_that_cannot_be_opened_is_known_by_its_code_and_by_its_text(tmp_path: Path) -> None:
    """Python 3.10's errors have no `sqlite_errorname` (reading it raised AttributeError there):
    store.py then knows SQLITE_CANTOPEN by SQLite's text for it, which is the whole message."""
    with pytest.raises(sqlite3.Error) as e:
        sqlite3.connect(tmp_path)  # a directory
    assert e.value.sqlite_errorname == "SQLITE_CANTOPEN"
    assert str(e.value) == CANTOPEN_TEXT
    assert cannot_open(e.value)
    assert cannot_open(sqlite3.OperationalError(CANTOPEN_TEXT))  # as on 3.10: no sqlite_errorname
    assert not cannot_open(sqlite3.DatabaseError("file is not a database"))
