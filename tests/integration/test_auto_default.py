"""Auto is the default (adrun/cli/planning.py): a run without `--strategy` profiles the script once and
remembers the plan in the records, so the next start of the same script on the same cluster reuses
it; the printed plan says why in one line; a one-step script on a cluster without PS processes (the
two ways the old default or Auto refused a smoke test) is planned and runs."""

from __future__ import annotations

import sqlite3

import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import flat, run_adrun
from tests.support.paths import TINY

pytestmark = pytest.mark.integration



def test_a_default_start_profiles_once_and_a_second_start_reuses_the_plan(spec_file, records_db):
    spec = str(spec_file(workers=2, ps=1))
    first = run_adrun("--spec", spec, "--dry-run", TINY, "--steps", "20")
    assert first.returncode == 0, first.output
    assert "profiling" in first.stderr and "the plan made earlier" not in first.stderr
    why = next(line for line in first.stderr.splitlines() if line.startswith("why Auto: "))
    # Auto's predicted step beside the next two builders'
    assert why.startswith("why Auto: predicted step ") and "; next: " in why and why.count(" ms") == 3, why
    with sqlite3.connect(records_db) as db:
        assert db.execute("SELECT count(*) FROM plans").fetchone() == (1,)  # the plan, remembered
    db.close()
    second = run_adrun("--spec", spec, "--dry-run", TINY, "--steps", "20")
    assert second.returncode == 0, second.output
    assert "profiling" not in second.stderr and "measuring the network" not in second.stderr
    assert "Auto: the plan made earlier for this graph on this cluster" in flat(second.stderr)
    assert why in second.stderr.splitlines()  # the remembered plan keeps its reason


def test_a_one_step_script_on_a_cluster_without_ps_is_planned_from_its_facts_and_runs(spec_file):
    result = run_adrun("--spec", str(spec_file(workers=2, ps=0)), TINY, "--steps", "1")
    assert result.returncode == 0, result.output
    out = flat(result.output)
    assert "so no step was timed: planning from the model's facts and the network alone" in out
    assert "no step was timed: planned from the model's facts and the network alone, compute not counted" in out
    assert "strategy Auto: 2 workers, 0 PS" in out
    assert leftover_processes(result.job_id) == []
