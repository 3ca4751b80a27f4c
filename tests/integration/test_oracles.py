"""Equivalence and averaging oracles (docs/testing.md) on a local multi-process cluster.

Each test trains tests/scripts/oracle_model.py under adrun, then computes in a separate plain
process what synchronous data-parallel SGD must give from the same initial values, averaging the
per-worker gradients independently in numpy, starting from the chief's initial values. Every
worker's final variables must match it (so every replica also started from the chief's values,
unseeded initializers notwithstanding), and global_step must equal the number of steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.exchange_waits import ps_task, written_graph
from tests.support.oracle import NUM_WORKERS, ORACLE_BUILDERS, SCRIPT, STEPS, train_and_compare

pytestmark = pytest.mark.integration

# One PS-family and one all-reduce case per model kind, crosswise; every builder and model with
# per-worker data: test_oracle_matrix (-m full).
@pytest.mark.parametrize("model,strategy", [("dense", "AllReduce"), ("sparse", "PSLoadBalancing")])
def test_averaging_per_worker_data(tmp_path, spec_file, strategy, model):
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", script_options=("--graph",))
    _assert_pooled(tmp_path / "out", model == "sparse")


@pytest.mark.parametrize("strategy,model,options", [
    ("PartitionedPS", "sparse", ()),
    pytest.param("UnevenPartitionedPS", "dense", (), marks=pytest.mark.full),  # PartitionedPS's kernel, other sizes
    ("Parallax", "sparse", ()),
    ("PartitionedAR", "sparse", ()),
    ("RandomAxisPartitionAR", "dense", ()),  # w [4, 3] is cut on axis 1 with seed 0
    ("PS", "sparse", ("local_proxy=true",)),
])
def test_averaging_strategy_library(tmp_path, spec_file, strategy, model, options):
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", *options, script_options=("--graph",))
    # pooled where the table is on the PS tasks and read from them (no local proxy)
    _assert_pooled(tmp_path / "out", strategy in ("PartitionedPS", "Parallax"))


# PSLoadBalancing's chunks: w [4, 3] cut into 3 kept on its PS, each pulled back into the workers'
# caches as soon as it is applied (runtime/kernels/ps_prefetch.py); MonitoredTrainingSession's
# restore-or-initialize and hooks read the variables outside the steps
@pytest.mark.parametrize("model,data,optimizer", [
    ("dense", "per-worker", "sgd"),
    ("dense-first", "per-worker", "adam"),
    pytest.param("mts", "same", "sgd", marks=pytest.mark.full),
    pytest.param("dense", "per-worker", "momentum", marks=pytest.mark.full),
])
def test_averaging_ps_chunks(tmp_path, spec_file, model, data, optimizer):
    train_and_compare(tmp_path, spec_file, "PSLoadBalancing", model, data, "chunk_bytes=16", optimizer=optimizer)


@pytest.mark.parametrize("strategy,model,optimizer", [
    ("PS", "sparse", "adam"),
    ("Parallax", "dense-first", "adam"),  # Adam's beta powers replicated on the workers, emb on a PS
    ("AllReduce", "while", "adam"),
    ("PSLoadBalancing", "lstm", "momentum"),
])
def test_averaging_optimizer_state_and_control_flow(tmp_path, spec_file, strategy, model, optimizer):
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer, script_options=("--graph",))
    _assert_pooled(tmp_path / "out", model in ("sparse", "dense-first"))


@pytest.mark.full
@pytest.mark.parametrize("strategy", ORACLE_BUILDERS)
@pytest.mark.parametrize("optimizer", ["adam", "momentum", "rmsprop", "adagrad"])
@pytest.mark.parametrize("model", ["sparse", "dense-first"])
def test_optimizer_matrix(tmp_path, spec_file, strategy, optimizer, model):
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer)


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["PS", "PSLoadBalancing", "AllReduce", "PartitionedPS", "Parallax"])
@pytest.mark.parametrize("model", ["while", "lstm"])
def test_control_flow_matrix(tmp_path, spec_file, strategy, model):
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer="adam")


# Keras under a plan: test_keras_fit; every builder and model on the same data: test_oracle_matrix (-m full)
@pytest.mark.parametrize("strategy,model", [("AllReduce", "mts")])
def test_equivalence_same_data(tmp_path, spec_file, strategy, model):
    train_and_compare(tmp_path, spec_file, strategy, model, "same")


@pytest.mark.full
@pytest.mark.parametrize("strategy", ORACLE_BUILDERS)
@pytest.mark.parametrize("model", ["dense", "sparse", "keras", "mts"])
@pytest.mark.parametrize("data", ["same", "per-worker"])
def test_oracle_matrix(tmp_path, spec_file, strategy, model, data):
    train_and_compare(tmp_path, spec_file, strategy, model, data)


# Pooled lookups (runtime/kernels/pooled_bags.py): a PS-held table's bags summed on its PS tasks.
# The models above whose table is on a PS (sparse, tables, dense-first) run pooled already; these
# add the other covered lookups and check in each worker's written graph that the pooled path ran.
def _pooled_gathers(out: Path) -> list[int]:
    """Per worker, the gathers of a pooled lookup on its PS tasks (one per shard of the table)."""
    counts = []
    for w in range(NUM_WORKERS):
        graph = written_graph(out / f"w{w}.graph.pb")
        counts.append(sum(1 for op in graph.get_operations() if op.type == "ResourceGather"
                          and op.name.startswith("adrun_pooled_lookup") and ps_task(op) is not None))
    return counts


def _assert_pooled(out: Path, pooled: bool) -> None:
    """Every worker pooled the lookup of `emb` on each of its shards (`pooled`), or none of it."""
    graph = written_graph(out / "w0.graph.pb")
    tables = sum(1 for op in graph.get_operations()
                 if op.type == "VarHandleOp" and op.name.split("/part_")[0] == "emb" and ps_task(op) is not None)
    assert tables > 0 or not pooled
    assert _pooled_gathers(out) == [tables if pooled else 0] * NUM_WORKERS


def _shards(plan: dict[str, Any]) -> int:
    """Shards of the tables (`emb`, or `emb0`..`emb2` of --model tables) on the PS tasks, together."""
    tables = [v for v in plan["variables"] if v["name"].startswith("emb")]
    return sum(len(v["partition"]["shards"]) if v.get("partition") else v["sync"]["kind"] == "ps" for v in tables)


@pytest.mark.parametrize("strategy,model,combiner", [
    ("PS", "bags-sparse", "mean"),  # embedding_lookup_sparse with an empty bag, whole table, synchronous
    ("PartitionedPS", "bags-sum", None),  # the table in shards on two PS tasks
])
def test_pooled_lookups_average(tmp_path, spec_file, strategy, model, combiner):
    _train_pooled(tmp_path, spec_file, strategy, model, combiner)


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["PS", "PSLoadBalancing", "PartitionedPS", "Parallax"])
@pytest.mark.parametrize("model,combiner", [
    ("sparse", None), ("bags-sum", None), ("bags-sparse", "mean"), ("bags-sparse", "sum"), ("bags-sparse", "sqrtn"),
    ("tables", None),
])
def test_pooled_lookup_matrix(tmp_path, spec_file, strategy, model, combiner):
    _train_pooled(tmp_path, spec_file, strategy, model, combiner)


def _train_pooled(tmp_path: Path, spec_file, strategy: str, model: str, combiner: str | None) -> None:
    plan: dict[str, Any] = {}
    model_options = ("--combiner", combiner) if combiner else ()
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", edit_plan=plan.update,
                      script_options=("--graph",), model_options=model_options)
    # embedding_lookup_sparse of a table in shards is not matched (pooled_lookups.py): today's path
    expected = 0 if model == "bags-sparse" and _shards(plan) > 1 else _shards(plan)
    assert _pooled_gathers(tmp_path / "out") == [expected] * NUM_WORKERS


def test_pool_bags_false_keeps_todays_path(tmp_path, spec_file):
    """`pool_bags: false` on the table's synchronizer: its rows are pulled and pushed as before."""
    def no_pooling(plan: dict[str, Any]) -> None:
        [emb] = [v for v in plan["variables"] if v["name"] == "emb"]
        emb["sync"]["pool_bags"] = False

    train_and_compare(tmp_path, spec_file, "PS", "sparse", "per-worker", edit_plan=no_pooling, script_options=("--graph",))
    assert _pooled_gathers(tmp_path / "out") == [0] * NUM_WORKERS
    graph = written_graph(tmp_path / "out" / "w0.graph.pb")
    assert [op.name for op in graph.get_operations() if op.type == "ResourceGather" and "adrun_distinct_lookup" in op.name]


@pytest.mark.parametrize("option", ["sync=false", "staleness=1"])
def test_async_pooled_lookup_updates_exactly_the_touched_rows(tmp_path, spec_file, option):
    """Asynchronous PS and bounded staleness: no reference to compare with (each worker applies its
    own gradient on arrival), so: the job trains, the pooled path ran, the last worker to finish
    reads every worker's steps in global_step, and its table changed in exactly the rows some batch
    named (a gradient row formed on the PS for the wrong id would change another)."""
    out = tmp_path / "out"
    result = run_adrun("--spec", str(spec_file(workers=NUM_WORKERS, ps=1)), "--strategy", "PS", "--strategy-opt",
                       option, SCRIPT, "--model", "sparse", "--data", "per-worker", "--steps", str(STEPS),
                       "--graph", "--out", str(out))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    assert _pooled_gathers(out) == [1] * NUM_WORKERS
    runs = [np.load(out / f"w{w}.npz") for w in range(NUM_WORKERS)]
    assert max(int(run["global_step"]) for run in runs) == NUM_WORKERS * STEPS
    touched = set()
    for w in range(NUM_WORKERS):
        for step in range(STEPS):  # oracle_model.py's batch_for with per-worker data
            rng = np.random.default_rng(1000 * w + step)
            rng.normal(size=(8, 4))
            touched |= set(rng.integers(0, 10 if w % 2 else 20, size=(8, 3)).ravel().tolist())
    last = max(runs, key=lambda run: int(run["global_step"]))
    # against the chief's initial values, read before any step (another worker may read them later)
    changed = {int(r) for r in np.flatnonzero(np.any(last["final/emb"] != runs[0]["init/emb"], axis=1))}
    assert changed == touched
