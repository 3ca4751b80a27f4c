"""The profiling run (adrun/profile/run.py): what one process measures in a few steps, and that it
leaves nothing the real run could find. Each test is one short profiling process of
tests/scripts/profile_model.py (a few seconds, mostly `import tensorflow`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.launch.job.teardown import leftover_processes
from adrun.profile.run import profile_model
from tests.support.adrun_cli import new_job_id
from tests.support.paths import SCRIPTS, files_under

pytestmark = pytest.mark.integration

MODEL = SCRIPTS / "profile_model.py"
FOREVER = ["--steps", "1000000000"]  # the script would train far longer than the profile lasts


def test_sparse_rows_touched_are_the_distinct_ids_of_each_batch(tmp_path, own_tmp):
    # every batch of 32 ids names exactly 7 of the first 7 rows; 10 steps after 2 warm-up, every other one timed
    profile = profile_model(MODEL, [*FOREVER, "--distinct", "7", "--head", "7"], 2, "profile-sparse", steps=10, warmup=2)
    assert leftover_processes("profile-sparse") == []
    assert profile.rows_touched.keys() == {"emb"}
    assert (profile.rows_touched["emb"].mean, profile.rows_touched["emb"].max) == (7.0, 7)
    # where they lie: 16 slices of the 100 rows cut as shards are (7, 7, 7, 7, 6, ...); every id is
    # in the first 7 rows, so all in the first slice
    assert profile.rows_touched["emb"].by_range == [7.0] + [0.0] * 15
    assert profile.steps_measured == 5
    assert 0 < profile.compute_s < 60
    assert profile.batch_size == 32  # from the feed: the graph's placeholders leave it open
    assert {v.name: v.grad for v in profile.graph.trainable_with_grads()} == {
        "emb": "sparse", "dense/kernel": "dense", "dense/bias": "dense"}
    assert files_under(own_tmp) == []


def test_keras_fit_is_profiled_through_its_callable_and_its_checkpoints_are_not_written(tmp_path, own_tmp):
    saves = tmp_path / "keras"
    profile = profile_model(MODEL, ["--steps", "200", "--keras", "--distinct", "5", "--saver", str(saves)], 2,
                            "profile-keras", steps=6, warmup=2)
    assert {name: (r.mean, r.max) for name, r in profile.rows_touched.items()} == {"embedding/embeddings": (5.0, 5)}
    assert profile.steps_measured == 3
    assert profile.batch_size == 32
    assert files_under(saves) == []  # its ModelCheckpoint saves after every batch


def plain_run(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, str(MODEL), *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_monitored_session_does_not_resume_from_the_profile(tmp_path, own_tmp):
    checkpoints = tmp_path / "ckpt"
    # without adrun's redirections this run would leave checkpoints of steps 0..8, graph.pbtxt and
    # an events file in ckpt/, and the real run would start at step 8
    profile_model(MODEL, [*FOREVER, "--mts", str(checkpoints)], 1, "profile-mts", steps=6, warmup=2)
    assert files_under(checkpoints) == []
    assert files_under(own_tmp) == []
    out = plain_run("--steps", "3", "--mts", str(checkpoints), cwd=tmp_path)
    assert "start-step 0" in out.splitlines()
    assert any(p.name.startswith("model.ckpt-") for p in files_under(checkpoints))  # the real run does write


def test_saver_and_summaries_leave_no_file(tmp_path, own_tmp):
    saves, summaries = tmp_path / "saves", tmp_path / "summaries"
    profile_model(MODEL, [*FOREVER, "--saver", str(saves), "--summaries", str(summaries)], 1, "profile-saver",
                  steps=4, warmup=1)
    assert files_under(saves) == [] and files_under(summaries) == []
    assert files_under(own_tmp) == []


def test_dense_script_ending_early_is_profiled_on_every_step_after_the_warm_up(own_tmp):
    profile = profile_model(MODEL, ["--steps", "5", "--dense"], 1, "profile-short", steps=20, warmup=2)
    assert profile.steps_measured == 3  # no sparse variable: no counting step, every step is timed
    assert profile.rows_touched == {}
    assert profile.compute_s > 0


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        (MODEL, ["--steps", "3", "--dense"], "ran 3 training step(s), all of them warm-up (4), so no step was timed"),
        (SCRIPTS / "tiny_model.py", ["--no-train"], "its graph has no training op"),
        # as capture refuses it (the first start's one process is a profiling one)
        (SCRIPTS / "eager_script.py", [], "ran to its end without an optimizer apply: it created 1 variable(s)"),
        (SCRIPTS / "touch_and_sleep.py", ["/dev/null", "0"], "finished without creating a tf.compat.v1.Session"),
        (SCRIPTS / "tiny_model.py", ["--steps", "9", "--fail-on", "0", "--fail-at", "6"],
         "failed while adrun profiled it (exit code 1); last lines of its stderr:"),
    ],
    ids=["only-warm-up", "no-training-op", "eager", "no-tensorflow", "crash"],
)
def test_unprofilable_scripts_are_refused_with_the_reason(script, args, message, own_tmp):
    job_id = new_job_id()  # each case its own: two cases may run at once on two xdist workers
    with pytest.raises(UserError) as refused:
        profile_model(script, args, 1, job_id, steps=4, warmup=4)
    assert message in str(refused.value)
    assert str(script) in str(refused.value)
    assert files_under(own_tmp) == []
    assert leftover_processes(job_id) == []


@pytest.mark.parametrize(("steps", "warmup", "message"), [
    (0, 2, "profiling steps: 0; give 1 to 100000"),
    (5, -1, "profiling warm-up steps: -1; give 0 to 100000"),
])
def test_impossible_step_counts_are_refused_before_running(steps, warmup, message):
    with pytest.raises(UserError, match=message):
        profile_model(Path("/no/such/script.py"), [], 1, "profile-args", steps=steps, warmup=warmup)
