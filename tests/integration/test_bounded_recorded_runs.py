"""Bounded runs (`--max-steps`, ADRUN_MAX_STEPS) and the records every run leaves (adrun/records/store.py).

A bounded synchronous run must end with every worker at exactly N steps, exit 0, and nothing left
running: no worker may wait for a peer that already left. A finished run adds exactly one trial to
the records database; `--no-record` leaves it as it was; a database adrun cannot use stops the run
before the capture with one message saying what to do.
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from adrun.launch.job.teardown import leftover_processes
from adrun.records.store import cluster_key, open_records
from adrun.spec import load_spec
from tests.support.adrun_cli import run_adrun
from tests.support.paths import SCRIPTS, TINY

pytestmark = pytest.mark.integration



def _step_lines(output: str, tag: str) -> list[int]:
    return [int(n) for n in re.findall(rf"^\[{tag}\] step (\d+)$", output, re.MULTILINE)]


@pytest.mark.parametrize("strategy,record", [("PS", True), ("AllReduce", False)])
def test_bounded_run_stops_every_worker_at_n_steps(tmp_path, spec_file, records_db, strategy, record):
    """PS (recorded) and AllReduce (--no-record, over a database holding one earlier trial).

    Under AllReduce a peer may still read a worker's server after that worker's last step (a ring
    peer fetching its last chunk): in its 5th step, after the step's collectives, w1 connects to
    w0's server for 3 s, which fails the run if w0 left after its own 5th step. The finish barrier
    keeps w0 up until w1 finished too (adrun/runtime/finish.py). A PS plan needs no barrier."""
    if not record:
        with open_records(records_db):
            pass
        before = records_db.read_bytes()
    result_json = tmp_path / "result.json"
    spec = spec_file(workers=2, ps=1)
    watch = ["--watch-w0-at", "5"] if strategy == "AllReduce" else []
    result = run_adrun("--spec", str(spec), "--strategy", strategy, "--max-steps", "5",
                       "--result-json", str(result_json), *([] if record else ["--no-record"]),
                       TINY, "--steps", "1000", *watch)
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    report = json.loads(result_json.read_text())
    assert {t["task"]: t["steps"] for t in report["tasks"] if t["role"] == "worker"} == {"w0": 5, "w1": 5}
    assert [t["exit_code"] for t in report["tasks"] if t["role"] == "worker"] == [0, 0]
    for tag in ("w0", "w1"):
        # the worker ends inside its 5th run, before the script prints it; code after it never runs
        assert _step_lines(result.stdout, tag) == [1, 2, 3, 4]
        assert f"[{tag}] done" not in result.stdout
    if record:
        assert re.search(rf"recorded as trial 1 in {re.escape(str(records_db))}", " ".join(result.stderr.split()))
        with sqlite3.connect(records_db) as db:
            assert db.execute("SELECT COUNT(*) FROM trials").fetchone() == (1,)
        with open_records(records_db) as records:
            (trial,) = records.trials(cluster_key(load_spec(spec)))
        assert trial.strategy.builder == "PS" and trial.strategy.num_workers == 2
        assert trial.steps_per_s > 0
        assert trial.workload == "tiny_model.py --steps 1000"
    else:
        assert "recorded as" not in result.output
        assert records_db.read_bytes() == before


def test_unusable_records_database_stops_the_run_before_capture(tmp_path, records_db):
    records_db.write_text("not a database " * 100)
    marker = tmp_path / "ran"
    result = run_adrun(str(SCRIPTS / "touch_and_sleep.py"), str(marker))
    assert result.returncode == 2, result.output
    message = " ".join(result.stderr.split())
    assert f"adrun: error: records database {records_db} cannot be used" in message
    assert "--no-record" in message and "Traceback" not in result.output
    assert not marker.exists() and "capturing" not in result.output
    assert leftover_processes(result.job_id) == []


@pytest.mark.parametrize("args,message", [
    (["--max-steps", "0"], "Invalid value for '--max-steps': 0 is not in the range x>=1"),
    (["--records", "x.sqlite", "--no-record"], "--records and --no-record contradict each other"),
])
def test_bad_bound_or_records_options_are_refused(tmp_path, args, message):
    result = run_adrun(*args, str(SCRIPTS / "touch_and_sleep.py"), str(tmp_path / "ran"))
    assert result.returncode == 2 and message in " ".join(result.stderr.split()), result.output
    assert not (tmp_path / "ran").exists()


def test_bad_max_steps_in_the_environment_is_refused(tmp_path):
    result = run_adrun(str(SCRIPTS / "touch_and_sleep.py"), str(tmp_path / "ran"), env={"ADRUN_MAX_STEPS": "ten"})
    assert result.returncode == 2, result.output
    assert "adrun: error: ADRUN_MAX_STEPS='ten': expected a whole number of training steps" in result.stderr
    assert not (tmp_path / "ran").exists()
