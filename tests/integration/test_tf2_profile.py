"""The profiling run of a TF2 script (adrun/runtime/tf2/profiler.py): steps timed at the optimizer's
applies (warm-up and row-counting steps left out), the distinct rows of each sparse gradient counted,
the model described as capture describes it (the same fingerprint, so a plan made from the profile
fits the run), and nothing written that the real run could find. One short process each."""

from __future__ import annotations


import pytest

from adrun.capture_run import capture_graph
from adrun.launch.job.teardown import leftover_processes
from adrun.profile.run import NoStepTimed, profile_model
from tests.support.paths import SCRIPTS, files_under

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODEL = SCRIPTS / "tf2_profile_model.py"
EMBEDDING = "sequential/embedding/embeddings"


def test_fit_is_timed_at_its_applies_and_its_rows_counted(own_tmp):
    profile = profile_model(MODEL, ["--distinct", "5"], 2, "tf2-profile-fit", steps=10, warmup=2)
    assert leftover_processes("tf2-profile-fit") == []
    # steps 0..11 ran; even steps count rows, so the odd steps from 2 on are timed: 3, 5, 7, 9, 11
    assert profile.steps_measured == 5 and 0 < profile.compute_s < 60
    assert profile.graph.kind == "tf2" and profile.batch_size == 8  # the traced step's batch
    assert {v.name: v.grad for v in profile.graph.trainable_with_grads()} == {
        EMBEDDING: "sparse", "sequential/dense/kernel": "dense", "sequential/dense/bias": "dense"}
    rows = profile.rows_touched[EMBEDDING]
    assert (rows.mean, rows.max) == (5.0, 5)
    # 16 slices of the 100 rows (7, 7, 7, 7, 6, ...): the 5 rows are all in the first
    assert rows.by_range == [5.0] + [0.0] * 15
    assert files_under(own_tmp) == []
    captured = capture_graph(MODEL, ["--distinct", "5"], 2, "tf2-capture-fit")
    assert captured.fingerprint == profile.graph.fingerprint


def test_an_eager_loop_is_timed_on_every_step_after_the_warm_up(own_tmp):
    profile = profile_model(MODEL, ["--kind", "loop-eager", "--dense"], 2, "tf2-profile-eager", steps=10, warmup=2)
    assert profile.steps_measured == 10 and profile.rows_touched == {} and profile.compute_s > 0
    assert profile.batch_size is None  # an eager step has no traced batch to read


def test_a_script_ending_early_is_profiled_on_its_steps_and_writes_nothing(tmp_path, own_tmp):
    saves = tmp_path / "saves"
    profile = profile_model(MODEL, ["--steps", "3", "--epochs", "2", "--save", str(saves)], 2, "tf2-profile-short",
                            steps=20, warmup=2)
    assert profile.steps_measured == 2  # 6 steps: 3 and 5 timed (0, 2, 4 counted rows; 1 warm-up)
    assert files_under(saves) == []  # checkpoints, backup and the final save went to a scratch directory
    assert files_under(own_tmp) == []


def test_a_script_with_no_step_after_the_warm_up_keeps_its_graph(own_tmp):
    with pytest.raises(NoStepTimed) as ended:
        profile_model(MODEL, ["--steps", "2", "--dense"], 2, "tf2-profile-untimed", steps=20, warmup=2)
    assert "ran 2 training step(s), all of them warm-up (2)" in str(ended.value)
    assert ended.value.graph.kind == "tf2" and len(ended.value.graph.trainable_with_grads()) == 4


@pytest.mark.full
def test_a_traced_loop_is_timed_and_counted_like_fit(own_tmp):
    profile = profile_model(MODEL, ["--kind", "loop-function", "--distinct", "3"], 2, "tf2-profile-function",
                            steps=10, warmup=2)
    assert profile.steps_measured == 5 and profile.batch_size == 8
    assert (profile.rows_touched[EMBEDDING].mean, profile.rows_touched[EMBEDDING].max) == (3.0, 3)
