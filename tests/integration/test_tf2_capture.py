"""Capture and planning of TF2 scripts: the capture stops at the first optimizer apply, the plan is
TF2's (AllReduce by default, PS refused), a script with no apply is refused with what it did, and
the hook on PYTHONPATH without adrun's variables changes nothing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from adrun.capture_run import capture_graph
from adrun.launch.env import HOOK_DIR
from adrun.launch.job.teardown import leftover_processes
from adrun.strategies.document import load_strategy
from tests.support.adrun_cli import run_adrun
from tests.support.tf2_oracle import SCRIPT, max_difference, plain, weights

pytestmark = pytest.mark.timeout(300)


def dry_run(tmp_path: Path, kind: str, *args: str, epochs: int = 100_000):
    out = tmp_path / "out"
    result = run_adrun("--dry-run", *args, SCRIPT, "--kind", kind, "--out", str(out), "--epochs", str(epochs))
    return result, out


def planned(result) -> Path:
    match = re.search(r"strategy written to (\S+);", result.output)
    assert match, result.output
    return Path(match.group(1))


@pytest.mark.parametrize("kind, sparse", [
    ("fit-sequential", set()),
    pytest.param("loop-eager", set(), marks=pytest.mark.full),
    ("embed-adam", {"sequential/embedding/embeddings"}),
])
def test_capture_stops_at_the_first_apply(tmp_path: Path, kind: str, sparse: set[str]) -> None:
    """A script that would train 100,000 epochs is captured before its first epoch ends (and
    planned with the AllReduce asked for: Auto, the default, would profile it first)."""
    result, out = dry_run(tmp_path, kind, "--strategy", "AllReduce")
    assert result.returncode == 0, result.output
    assert not (out / "epochs.txt").exists(), "the capture trained a whole epoch"
    plan = load_strategy(planned(result))
    assert (plan.kind, plan.builder) == ("tf2", "AllReduce")
    assert "strategy AllReduce (TF2 script): 2 workers, 1 PS" in result.output  # --dry-run prints the plan
    assert {v.name for v in plan.variables if v.grad == "sparse"} == sparse
    assert [v.shape for v in plan.variables if v.grad == "dense"][-2:] == [[4 if sparse else 16, 1], [1]]
    assert leftover_processes(result.job_id) == []


def test_capture_of_two_optimizers_in_one_step(tmp_path: Path) -> None:
    """A GAN's train_step applies two optimizers: the capture waits for both (its traced step's
    first run), so the GraphItem has the generator's and the critic's variables, both optimizers
    and the per-worker batch size."""
    item = capture_graph(Path(SCRIPT), ["--kind", "gan", "--out", str(tmp_path / "out"), "--epochs", "100000"],
                         2, "capture-gan")
    assert (item.kind, item.keras, item.optimizer, item.batch_size) == ("tf2", "keras3", "Adam, SGD", 8)
    assert [v.shape for v in item.variables] == [[4, 1], [1], [8, 4], [4]]
    assert {v.grad for v in item.variables} == {"dense"}
    assert not (tmp_path / "out" / "epochs.txt").exists()


def test_mixed_plans_are_refused_for_tf2_when_planned(tmp_path: Path) -> None:
    result, _ = dry_run(tmp_path, "embed-adam", "--strategy", "Parallax")
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    assert "a plan mixing parameter servers ('sequential/embedding/embeddings') and all-reduce" in result.output, \
        result.output
    assert "Cannot enable remote execution as well as collective ops at the moment" in result.output
    assert leftover_processes(result.job_id) == []


def test_script_updating_variables_by_hand_is_refused(tmp_path: Path) -> None:
    result, _ = dry_run(tmp_path, "by-hand", epochs=2)
    assert result.returncode == 2, result.output
    [line] = [line for line in result.stderr.splitlines() if line.startswith("adrun: error: ")]
    assert "ran to its end without an optimizer apply: it created 1 variable(s) (Variable)" in line, line
    assert "updates variables by hand (assign_sub, raw ops) is not supported" in line, line
    assert leftover_processes(result.job_id) == []


def test_hook_without_adrun_variables_is_inert(tmp_path: Path) -> None:
    """adrun's sitecustomize on PYTHONPATH, no ADRUN_* variables: bit for bit the plain run."""
    bare = weights(plain("fit-sequential", tmp_path / "bare") / "w0.npz")
    path = os.pathsep.join(p for p in (str(HOOK_DIR), os.environ.get("PYTHONPATH", "")) if p)
    hooked = weights(plain("fit-sequential", tmp_path / "hooked", env={"PYTHONPATH": path}) / "w0.npz")
    assert max_difference(bare, hooked) == 0.0
