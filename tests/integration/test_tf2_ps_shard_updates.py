"""The chief's synchronous update of a variable split over PS shards runs on the shards' PS
(adrun/runtime/tf2/ps_shard_updates.py): no shard's mean gradient, value or optimizer slot comes to
the chief, measured as the bytes the PS sends the chief per step through a counting forwarder
(tests/scripts/tf2_ps_shard_updates.py), against Keras's update of the whole variable on the chief."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO, SCRIPTS
from tests.support.byte_counter import run_counted_ps_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = str(SCRIPTS / "tf2_ps_shard_updates.py")
ROW = 32 * 4  # bytes of one float32 row of the script's variables
OVERHEAD = 2048  # per step, for the tokens and RPCs around the update


def test_the_chief_reads_no_shard_in_its_update(tmp_path: Path) -> None:
    found = run_counted_ps_script(SCRIPT, tmp_path / "bytes.json", REPO)
    # the control, Keras's update of the whole variable on the chief: Adam reads the kernel's mean
    # and both its slots (4096 rows each); SGD the table's mean rows (62 distinct of 64)
    assert found["whole_dense_adam"] >= 3 * 4096 * ROW, found
    assert found["whole_rows_sgd"] >= 62 * ROW, found
    # shard by shard on the PS: nothing of either
    assert found["shards_dense_adam"] <= OVERHEAD, found
    assert found["shards_rows_sgd"] <= OVERHEAD, found
