"""Fixtures every test may use: adrun's records and homes kept apart from the user's, local
cluster specs, and adrun started in the background. Their logic lives in tests/support/. Also the
one rule of the parallel run (pytest-xdist, docs/testing.md): the namespace-host tests share a worker;
and the signals: Python's own SIGINT handler however the suite was started, and no test leaving
SIGINT's or SIGTERM's handler changed for the tests after it."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.adrun_cli import write_spec
from tests.support.live_jobs import LiveAdrun, live_jobs


NETNS_GROUP = "netns"  # the xdist_group of every `cluster` test


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every `cluster` test in one xdist group, so under `--dist loadgroup` they run one after another
    on one worker: they make root-namespace bridges, veths, sshds, tc qdiscs and nftables tables
    and pick a free 10.77.X subnet by looking first, which two at once could both pick. Outside
    `-n`, the marker does nothing."""
    for item in items:
        if item.get_closest_marker("cluster") is not None:
            item.add_marker(pytest.mark.xdist_group(NETNS_GROUP))


GUARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(scope="session", autouse=True)
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt) for the whole session, as when pytest is
    started from a terminal. A command a non-interactive shell starts in the background (`make
    test > log &`, `nohup make test &` in a script) starts with SIGINT ignored, Python keeps it
    ignored, and so do the xdist workers and every process a test starts: a test sending itself or
    a child a SIGINT would then see nothing happen (test_standing_probes' Ctrl-C test failed so in
    a clean-clone suite). The previous handler is back after the session."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; pytest and its xdist workers run tests there
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(autouse=True)
def signals_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test (or its fixtures) that leaves SIGINT's or SIGTERM's handler changed fails, naming it,
    and the handler is put back: else every later test in the same process (an xdist worker runs
    hundreds) inherits it, and one that relies on a signal fails far from the cause."""
    before = {sig: signal.getsignal(sig) for sig in GUARDED_SIGNALS}
    yield
    changed = {sig: signal.getsignal(sig) for sig in GUARDED_SIGNALS if signal.getsignal(sig) != before[sig]}
    for sig in changed:
        signal.signal(sig, before[sig])
    if changed:
        left = "; ".join(f"{sig.name} {changed[sig]!r} (was {before[sig]!r})" for sig in changed)
        pytest.fail(f"{request.node.nodeid} left signal handlers changed: {left}. Restore them in the test or "
                    "fixture that sets them (signal.signal returns the previous handler), or in the code under test.",
                    pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def adrun_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every adrun the tests start records its jobs here (ADRUN_HOME), not in the user's ~/.adrun;
    one per pytest process, so each xdist worker has its own (tmp_path_factory's base is per worker)."""
    home = tmp_path_factory.mktemp("adrun-home")
    os.environ["ADRUN_HOME"] = str(home)
    return home


@pytest.fixture(autouse=True)
def records_db(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's adrun runs record into a database of their own (ADRUN_RECORDS), never into the
    user's ~/.adrun, in a directory apart from tmp_path so a test's own files stay its own."""
    path = tmp_path_factory.mktemp("records") / "records.sqlite"
    monkeypatch.setenv("ADRUN_RECORDS", str(path))
    return path


@pytest.fixture
def spec_file(tmp_path: Path) -> Callable[..., Path]:
    """A factory for local cluster specs in the test's temporary directory."""

    def make(workers: int = 2, ps: int = 1, **node_fields: object) -> Path:
        return write_spec(tmp_path / f"cluster-{workers}w{ps}ps.yml", workers, ps, **node_fields)

    return make


@pytest.fixture
def live() -> Iterator[Callable[..., LiveAdrun]]:
    """`live(*args, env=...)` starts adrun in the background (tests/support/live_jobs.py); every job
    started is killed with its leftovers at the end."""
    yield from live_jobs()
