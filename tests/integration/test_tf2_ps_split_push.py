"""A synchronous step pushes each shard's part of a split variable's gradient to that shard's PS
(adrun/runtime/tf2/ps_apply.py gradient_parts), measured as the bytes each of 2 PSs receives for one
push through a counting forwarder (tests/scripts/tf2_ps_split_push.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO, SCRIPTS
from tests.support.ports import free_ports

pytestmark = pytest.mark.timeout(300)

SCRIPT = str(SCRIPTS / "tf2_ps_split_push.py")
ROW = 32 * 4  # bytes of one float32 row of the script's variables
ID = 8  # an int64 row id
OVERHEAD = 2048  # per push and PS, for the RPCs around the tensors (measured: under 900 bytes)


def test_each_ps_receives_its_shards_gradient_only(tmp_path: Path) -> None:
    ps0, ps1, fwd0, fwd1, worker_port = (str(p) for p in free_ports(5))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    servers = [subprocess.Popen([sys.executable, SCRIPT, "ps", str(task), port], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for task, port in enumerate((ps0, ps1))]
    try:
        out = tmp_path / "bytes.json"
        worker = subprocess.run([sys.executable, SCRIPT, "worker", ps0, ps1, fwd0, fwd1, worker_port, str(out)],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
        assert worker.returncode == 0, worker.stderr[-3000:]
    finally:
        for server in servers:
            server.kill()
            server.wait()
    found = json.loads(out.read_text())
    # the control: a gradient pushed whole goes to one PS, all 4096 rows of it
    whole0, whole1 = found["dense_whole_to_ps0"]
    assert whole0 >= 4096 * ROW and whole1 <= OVERHEAD
    # a dense gradient of a variable split in 2: each PS receives its 2048 rows
    for got in found["dense_split"]:
        assert 2048 * ROW <= got <= 2048 * ROW + OVERHEAD, found
    # 64 gradient rows of a split table, 48 of shard 0 and 16 of shard 1: each PS its own rows and ids
    for got, rows in zip(found["rows_split"], (48, 16), strict=True):
        assert rows * (ROW + ID) <= got <= rows * (ROW + ID) + OVERHEAD, found
