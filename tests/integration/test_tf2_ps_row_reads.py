"""A Keras 3 Embedding whose table is shared on a PS reads only its looked-up rows, each distinct row
once (adrun/runtime/tf2/ps_gather.py), split in shards too (ps_shards.py), measured as the bytes the
PS sends the worker per training step through a counting forwarder (tests/scripts/tf2_ps_row_reads.py).
Inside a `tf.function` a PS fetches a worker's tensors from the worker's own server, past the
forwarder, so the pushes are measured on the benchmark's hosts instead (docs/tf2-plans.md) and their
rows checked in tests/unit/adrun/runtime/tf2/test_ps_apply.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO, SCRIPTS
from tests.support.byte_counter import run_counted_ps_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = str(SCRIPTS / "tf2_ps_row_reads.py")
ROW = 32 * 4  # bytes of one float32 row of the script's tables
OVERHEAD = 1024  # per step, for the RPCs around the rows (measured: under 300 bytes)


def test_lookup_reads_the_distinct_rows_not_the_table(tmp_path: Path) -> None:
    found = run_counted_ps_script(SCRIPT, tmp_path / "bytes.json", REPO)
    # the negative control: Keras's own read ships the whole 20000-row table every step
    assert found["keras_read"] >= 20000 * ROW
    # the row gather: the looked-up rows, whatever the table's size
    for rows, looked_up in ((20000, 64), (80000, 64), (20000, 512)):
        assert looked_up * ROW <= found[f"gather_{rows}_{looked_up}"] <= looked_up * ROW + OVERHEAD, (rows, looked_up)
    # a table split in 2 shards (PartitionedPS): each shard gathers its own rows
    assert 64 * ROW <= found["split_20000_64"] <= 64 * ROW + 2 * OVERHEAD
    # 512 ids naming 64 rows 8 times each: the lookup reads the 64 (split in shards too); the
    # variable's own gather, the control, reads all 512
    assert found["every_id_64x8"] >= 512 * ROW
    assert 64 * ROW <= found["distinct_64x8"] <= 64 * ROW + OVERHEAD
    assert 64 * ROW <= found["split_distinct_64x8"] <= 64 * ROW + 2 * OVERHEAD
