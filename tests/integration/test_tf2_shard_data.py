"""TF2 mode's --shard-data: Keras 3 fit on 11 rows with N = 2 and 3 workers gives worker i rows
(or batches) i::N of the input cut to a multiple of N, the same step count on every worker, and
whole validation data (adrun/runtime/tf2/input_sharding.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import SCRIPTS

pytestmark = pytest.mark.integration


def _workers(num_workers: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRUN_")}
    procs = [subprocess.Popen([sys.executable, str(SCRIPTS / "tf2around_sharding.py"), str(num_workers), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"})
             for i in range(num_workers)]
    reports = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr[-3000:]
        reports.append(json.loads(stdout.strip().splitlines()[-1]) | {"adrun_says": [
            line for line in stderr.splitlines() if line.startswith("adrun: ")]})
    return reports


def _batches(rows: list[int], size: int) -> list[list[int]]:
    return [rows[k:k + size] for k in range(0, len(rows), size)]


@pytest.mark.parametrize("num_workers", [2, pytest.param(3, marks=pytest.mark.full)])  # 3: 2 rows left out
def test_fit_input_is_split_by_row_and_batch_with_equal_steps(num_workers):
    reports = _workers(num_workers)
    kept_rows = 11 - 11 % num_workers
    assert reports[0]["adrun_says"] == [  # the 6 batches split evenly: nothing to say about them
        f"adrun: --shard-data: fit's input has 11 rows; each of the {num_workers} workers trains on "
        f"{11 // num_workers} of them per epoch, and the last {11 % num_workers} are left out so that every "
        f"worker runs the same number of steps"]
    assert all(report["adrun_says"] == [] for report in reports[1:])
    all_batches = _batches(list(range(11)), 2)  # the dataset's 6 batches, the last one [10]
    kept_batches = all_batches[:len(all_batches) - len(all_batches) % num_workers]
    for i, report in enumerate(reports):
        rows = list(range(i, kept_rows, num_workers))
        assert report["arrays"]["train"] == _batches(rows, 2) * 2  # 2 epochs, unshuffled
        assert report["arrays"]["validation"] == sorted(list(range(5)) * 2)  # whole, each epoch
        assert report["dataset"]["train"] == kept_batches[i::num_workers] * 2
    for kind in ("arrays", "dataset"):
        steps = {tuple(report[kind]["steps_per_epoch"]) for report in reports}
        assert len(steps) == 1, (kind, steps)  # every worker runs the same number of steps
    seen = sorted(r for report in reports for batch in report["arrays"]["train"][:len(report["arrays"]["train"]) // 2]
                  for r in batch)
    assert seen == list(range(kept_rows))  # disjoint and complete up to the dropped remainder
