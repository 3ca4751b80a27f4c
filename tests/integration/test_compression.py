"""All-reduce compressors (docs/testing.md): wire bytes, error against exact averaging, error
feedback, convergence.

The payload is what each worker hands to its dense collectives per step, summed from the actual
tensors passed to the collective ops (reported in the run summary), not read from a setting.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.integration
SHAPE = (64, 48)
DENSE_BYTES = SHAPE[0] * SHAPE[1] * 4


def _constant(w: int, step: int) -> np.ndarray:
    return np.random.default_rng(10_000 * w + step).normal(scale=1e-2, size=SHAPE).astype(np.float32)


def _train(tmp_path, spec_file, compressor: str, *args: str) -> tuple[int, dict[int, dict]]:
    out = tmp_path / compressor
    out.mkdir()
    result = run_adrun("--spec", str(spec_file(workers=2, ps=0)), "--strategy", "AllReduce",
                       "--strategy-opt", f"compressor={compressor}", "--quiet",
                       str(SCRIPTS / "compression_model.py"), "--out", str(out), *args, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    payload = re.search(r"all-reduce payload ([\d,]+) B/step", result.output)
    assert payload, result.output
    workers = {w: dict(np.load(out / f"w{w}.npz")) for w in (0, 1)}
    np.testing.assert_array_equal(workers[0]["w"], workers[1]["w"], err_msg="replicas diverged")
    return int(payload.group(1).replace(",", "")), workers


def _relative_error(w: np.ndarray, exact: np.ndarray) -> float:
    return float(np.linalg.norm(w - exact) / np.linalg.norm(exact))


def test_fp16_halves_the_payload_and_error_feedback_removes_accumulated_rounding(tmp_path, spec_file):
    steps = 100
    # identical constants on both workers: the sum inside the collective is exact (x + x), so what
    # remains is the compressor's own rounding, which error feedback must not let accumulate
    exact = -sum(_constant(0, s).astype(np.float64) for s in range(steps))
    none_bytes, plain = _train(tmp_path, spec_file, "none", "--model", "constant", "--steps", "5")
    fp16_bytes, fp16 = _train(tmp_path, spec_file, "fp16", "--model", "constant", "--same-data", "--steps", str(steps))
    ef_bytes, ef = _train(tmp_path, spec_file, "fp16-ef", "--model", "constant", "--same-data", "--steps", str(steps))

    assert none_bytes == DENSE_BYTES
    assert fp16_bytes == ef_bytes == DENSE_BYTES // 2
    exact_5 = -sum((_constant(0, s) + _constant(1, s)).astype(np.float64) / 2 for s in range(5))
    assert _relative_error(plain[0]["w"], exact_5) < 1e-6
    fp16_error, ef_error = _relative_error(fp16[0]["w"], exact), _relative_error(ef[0]["w"], exact)
    assert 1e-5 < fp16_error < 1e-3, "fp16 must be close to exact, and not secretly fp32"
    assert ef_error < fp16_error / 4, f"error feedback {ef_error:.2e} vs plain fp16 {fp16_error:.2e}"


def test_powersgd_sends_low_rank_factors_and_still_converges(tmp_path, spec_file):
    payload, workers = _train(tmp_path, spec_file, "powersgd", "--model", "regression", "--steps", "60")
    assert payload == (SHAPE[0] + SHAPE[1]) * 4  # rank 1: P (64x1) and Q (48x1), float32
    losses = workers[0]["losses"]
    assert losses[-1] < losses[0] / 5, f"loss {losses[0]:.4f} -> {losses[-1]:.4f}"
