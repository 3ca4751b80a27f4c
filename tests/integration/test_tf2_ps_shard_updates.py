"""The chief's synchronous update of a variable split over PS shards runs on the shards' PS
(adrun/runtime/tf2/ps_shard_updates.py): no shard's mean gradient, value or optimizer slot comes to
the chief, measured as the bytes the PS sends the chief per step through a counting forwarder
(tests/scripts/tf2_ps_shard_updates.py), against Keras's update of the whole variable on the chief."""

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

SCRIPT = str(SCRIPTS / "tf2_ps_shard_updates.py")
ROW = 32 * 4  # bytes of one float32 row of the script's variables
OVERHEAD = 2048  # per step, for the tokens and RPCs around the update


def test_the_chief_reads_no_shard_in_its_update(tmp_path: Path) -> None:
    ps_port, forwarder_port, worker_port = (str(p) for p in free_ports(3))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    ps = subprocess.Popen([sys.executable, SCRIPT, "ps", ps_port], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = tmp_path / "bytes.json"
        worker = subprocess.run([sys.executable, SCRIPT, "worker", ps_port, forwarder_port, worker_port, str(out)],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
        assert worker.returncode == 0, worker.stderr[-3000:]
    finally:
        ps.kill()
        ps.wait()
    found = json.loads(out.read_text())
    # the control, Keras's update of the whole variable on the chief: Adam reads the kernel's mean
    # and both its slots (4096 rows each); SGD the table's mean rows (62 distinct of 64)
    assert found["whole_dense_adam"] >= 3 * 4096 * ROW, found
    assert found["whole_rows_sgd"] >= 62 * ROW, found
    # shard by shard on the PS: nothing of either
    assert found["shards_dense_adam"] <= OVERHEAD, found
    assert found["shards_rows_sgd"] <= OVERHEAD, found
