"""TF2 mode's two collective groups, run: the GPU group's route pointed at a second virtual CPU
(tests/scripts/tf2_routes_worker.py), two workers started without adrun. Floating-point collectives
run on that device in their own group, integer ones on CPU:0 in the host group, in one traced step
(the float ones under their device's ordering token, the host ones each under its own), and every
result is exact. What this cannot show without a GPU (NCCL
itself, CUDA_VISIBLE_DEVICES): docs/gpu.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO, SCRIPTS
from tests.support.ports import free_ports

pytestmark = [pytest.mark.full, pytest.mark.timeout(300)]  # two TF processes


def test_floats_and_integers_take_their_own_group_and_device(tmp_path: Path) -> None:
    ports = [str(p) for p in free_ports(2)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRUN_")}
    procs = [subprocess.Popen([sys.executable, str(SCRIPTS / "tf2_routes_worker.py"), str(i), *ports,
                               str(tmp_path / f"w{i}.json")], cwd=REPO, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
    reports = [json.loads((tmp_path / f"w{i}.json").read_text()) for i in range(2)]
    for i, report in enumerate(reports):
        assert report["weights"] == [1.0, 1.0, 1.0]  # worker 0's initial values, through the float group
        assert report["counts"] == [10]  # and its int64 one, through the host group
        assert report["dense"] == [1.5, 3.0, 4.5]  # mean of (1, 2, 3) x 1 and x 2
        assert report["indices"] == [0, 0, 1]  # worker 0's row, then worker 1's two
        assert report["values"] == [[0.5, 0.5], [1.0, 1.0], [1.0, 1.0]]  # each row / 2
        devices = report["devices"]
        assert devices["float reduce"] == f"/job:worker/replica:0/task:{i}/device:CPU:1", devices
        assert devices["int64 gather"] == f"/job:worker/replica:0/task:{i}/device:CPU:0", devices
    received = reports[1]["devices"]  # worker 0 sends: its result is its own input
    assert received["float broadcast"] == "/job:worker/replica:0/task:1/device:CPU:1", received
    assert received["int64 broadcast"] == "/job:worker/replica:0/task:1/device:CPU:0", received
