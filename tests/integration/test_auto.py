"""`--strategy Auto` in a run and in `strategy build` (adrun/gathering.py, strategies/auto.py): its plan trains as
exactly data-parallel SGD (the averaging oracle, tests/support/oracle.py), the run is recorded with the
profile and network facts Auto saved, a later plan reuses the network facts and is fitted on the
record, Auto's options reach the plan, and scripts Auto cannot plan get one clear message."""

from __future__ import annotations

import pytest
import yaml

from adrun.launch.job.teardown import leftover_processes
from adrun.records.store import cluster_key, open_records
from adrun.spec import load_spec
from adrun.strategies.facts import Link, NetworkFacts
from tests.support.adrun_cli import flat, run_adrun
from tests.support.oracle import SCRIPT, STEPS, train_and_compare
from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.integration


def test_auto_run_is_data_parallel_sgd_and_teaches_the_next_plan(tmp_path, spec_file, records_db):
    result = train_and_compare(tmp_path, spec_file, "Auto", "sparse", "per-worker")
    out = flat(result.stderr)
    assert "measuring the network" in out
    assert "cost model: analytical coefficients (no usable records of this cluster)" in out
    assert f"recorded as trial 1 in {records_db}" in out
    spec = load_spec(tmp_path / "cluster-2w1ps.yml")
    with open_records(records_db) as records:
        (trial,) = records.trials(cluster_key(spec))
        assert trial.strategy.builder == "Auto" and trial.steps_per_s > 0
        # the profile Auto took and the network it measured, both saved and attached to the record
        assert trial.profile is not None and trial.profile.graph.fingerprint == trial.strategy.fingerprint
        assert trial.profile.batch_size == 8 and trial.profile.rows_touched.keys() == {"emb"}
        assert trial.network is not None and trial.network == records.network_for(cluster_key(spec))
        assert trial.network.local.source == "measured"

    plan_file = tmp_path / "lossy.yml"
    built = run_adrun("strategy", "build", "Auto", "--spec", str(tmp_path / "cluster-2w1ps.yml"),
                      "--strategy-opt", "allow_lossy=true", "-o", str(plan_file),
                      SCRIPT, "--model", "sparse", "--data", "per-worker", "--steps", str(STEPS),
                      "--out", str(tmp_path / "out2"))
    assert built.returncode == 0, built.output
    out = flat(built.stderr)
    assert "measuring the network" not in out  # the stored facts of this cluster were reused
    assert "cost model fitted on 1 record(s) of this cluster: mean step-time error" in out
    plan = yaml.safe_load(plan_file.read_text())
    assert plan["builder"] == "Auto"
    assert plan["options"] == {"allow_lossy": True, "allow_staleness": False}


@pytest.mark.full
def test_measure_network_and_no_record(tmp_path, spec_file, records_db):
    """--measure-network measures again although facts of this cluster are stored (and keeps the new
    ones); --no-record neither reads the records (no reuse) nor writes them."""
    spec = spec_file(workers=2, ps=1)
    stored = NetworkFacts(local=Link(bytes_per_s=1.0, latency_s=1.0, source="spec"))  # a figure nothing measures
    with open_records(records_db) as records:
        records.save_network(cluster_key(load_spec(spec)), stored)
    script = [SCRIPT, "--model", "dense", "--data", "same", "--steps", str(STEPS), "--out", str(tmp_path / "out")]
    again = run_adrun("strategy", "build", "Auto", "--spec", str(spec), "--measure-network",
                      "-o", str(tmp_path / "a.yml"), *script)
    assert again.returncode == 0 and "measuring the network" in again.stderr, again.output
    with open_records(records_db) as records:
        measured = records.network_for(cluster_key(load_spec(spec)))
    assert measured.local.source == "measured" and measured.local.bytes_per_s > 1.0
    before = records_db.read_bytes()
    unrecorded = run_adrun("strategy", "build", "Auto", "--spec", str(spec), "--no-record",
                           "-o", str(tmp_path / "b.yml"), *script)
    assert unrecorded.returncode == 0 and "measuring the network" in unrecorded.stderr, unrecorded.output
    assert records_db.read_bytes() == before


@pytest.mark.parametrize("script,args,message", [
    # the capture comes first (its fingerprint names a remembered plan): its refusal, as for any builder
    ("eager_script.py", [], "ran to its end without an optimizer apply"),
    ("tiny_model.py", ["--no-train"], "its graph has no training op"),
])
def test_scripts_auto_cannot_plan_get_one_message(tmp_path, spec_file, script, args, message):
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--strategy", "Auto", str(SCRIPTS / script), *args)
    assert result.returncode == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("adrun: error: ")]
    assert len(errors) == 1 and message in flat(result.stderr), result.output
    assert "Traceback" not in result.output
    assert leftover_processes(result.job_id) == []


def test_unknown_auto_option_is_refused_before_profiling(tmp_path, spec_file):
    marker = tmp_path / "ran"
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--strategy", "Auto",
                       "--strategy-opt", "allow_speed=true", str(SCRIPTS / "touch_and_sleep.py"), str(marker))
    assert result.returncode == 2, result.output
    assert "adrun: error: Auto options: unknown field 'allow_speed' (did you mean 'allow_staleness'?)" \
        in flat(result.stderr)
    assert not marker.exists() and "profiling" not in result.stderr
