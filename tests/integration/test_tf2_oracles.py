"""TF2 scripts under adrun equal their plain run (equivalence) and the mean-gradient reference
(averaging), for every script kind tests/scripts/tf2_model.py has (docs/testing.md oracles 1, 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.tf2_oracle import (
    KINDS, TOLERANCE, adrun_fit, averaging, averaging_tolerance, equivalence, max_difference, plain, weights,
)

pytestmark = pytest.mark.timeout(600)

RecordProperty = Callable[[str, object], None]  # pytest's record_property fixture

FAST_EQUIVALENCE = ["fit-sequential"]
FAST_AVERAGING = ["loop-function", "embed-adam"]


@pytest.mark.parametrize("kind", FAST_EQUIVALENCE)
def test_equivalence(tmp_path: Path, kind: str) -> None:
    assert equivalence(tmp_path, kind) <= TOLERANCE


@pytest.mark.parametrize("kind", FAST_AVERAGING)
def test_averaging(tmp_path: Path, kind: str) -> None:
    off, between = averaging(tmp_path, kind)
    assert off <= TOLERANCE
    assert between == 0.0  # every worker applies the same mean: bit for bit the same weights


@pytest.mark.full
@pytest.mark.parametrize("kind", [k for k in KINDS if k not in FAST_EQUIVALENCE])
def test_equivalence_of_every_kind(tmp_path: Path, kind: str, record_property: RecordProperty) -> None:
    off = equivalence(tmp_path, kind)
    record_property("max_difference", off)  # the figure of the goal, in --junitxml's report
    assert off <= TOLERANCE


@pytest.mark.full
@pytest.mark.parametrize("kind", [k for k in KINDS if k not in FAST_AVERAGING])
def test_averaging_of_every_kind(tmp_path: Path, kind: str, record_property: RecordProperty) -> None:
    """mixed-fp16 among them: LossScaleOptimizer's finite check comes after the reduction, so the
    workers skip the same steps and stay identical."""
    off, between = averaging(tmp_path, kind)
    record_property("max_difference", off)
    assert off <= averaging_tolerance(kind)
    assert between == 0.0


@pytest.mark.full
@pytest.mark.parametrize("kind", KINDS)
def test_four_workers(tmp_path: Path, kind: str, record_property: RecordProperty) -> None:
    """Both oracles on 4 workers: the same data (worker 1 seeded differently), then rows w::4."""
    (tmp_path / "same").mkdir()
    (tmp_path / "sharded").mkdir()
    same = equivalence(tmp_path / "same", kind, workers=4)
    off, between = averaging(tmp_path / "sharded", kind, workers=4)
    record_property("max_difference", max(same, off))
    assert same <= TOLERANCE
    assert off <= averaging_tolerance(kind)
    assert between == 0.0


def test_negative_control(tmp_path: Path) -> None:
    """A worker alone on its rows, without synchronization, fails the averaging tolerance: the
    oracle catches "no synchronization at all"."""
    kind = "loop-function"
    expected = weights(plain(kind, tmp_path / "ref", "--data", "per-worker", "--reference", "2") / "reference.npz")
    alone = plain(kind, tmp_path / "alone", "--data", "per-worker",
                  env={"ADRUN_WORKER_INDEX": "0", "ADRUN_NUM_WORKERS": "2"})
    assert max_difference(weights(alone / "w0.npz"), expected) > 100 * TOLERANCE


@pytest.mark.full
@pytest.mark.parametrize("compressor, tolerance", [("fp16", 1e-4), ("fp16-ef", 1e-4), ("powersgd", None)])
def test_compressors(tmp_path: Path, compressor: str, tolerance: float | None) -> None:
    """Graph mode's compressors inside a traced loop, in groups of two variables: fp16 rounding
    leaves the workers identical and near the reference; PowerSGD (rank 1, lossy) identical."""
    expected = weights(plain("loop-function", tmp_path / "ref", "--data", "per-worker", "--reference", "2")
                       / "reference.npz")
    _, out = adrun_fit(tmp_path, "loop-function", 2, "--data", "per-worker", strategy=(
        "--strategy", "AllReduce", "--strategy-opt", f"compressor={compressor}", "--strategy-opt", "chunk_size=2"))
    found = [weights(out / f"w{w}.npz") for w in range(2)]
    assert max_difference(found[0], found[1]) == 0.0
    if tolerance is not None:
        assert max_difference(found[0], expected) <= tolerance


@pytest.mark.full
@pytest.mark.parametrize("kind", ["fit-sequential", "embed-adam"])
def test_partitioned_allreduce(tmp_path: Path, kind: str) -> None:
    """PartitionedAR: each gradient cut into the plan's shards, each reduced in its own group, and
    joined again: still the mean gradient."""
    expected = weights(plain(kind, tmp_path / "ref", "--data", "per-worker", "--reference", "2") / "reference.npz")
    _, out = adrun_fit(tmp_path, kind, 2, "--data", "per-worker", strategy=(
        "--strategy", "PartitionedAR", "--strategy-opt", "chunk_size=1"))
    found = [weights(out / f"w{w}.npz") for w in range(2)]
    assert max_difference(found[0], found[1]) == 0.0
    assert max_difference(found[0], expected) <= TOLERANCE
