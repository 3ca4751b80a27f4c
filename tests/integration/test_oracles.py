"""Equivalence and averaging oracles (docs/testing.md) on a local multi-process cluster.

Each test trains tests/scripts/oracle_model.py under adrun, then computes in a separate plain
process what synchronous data-parallel SGD must give from the same initial values, averaging the
per-worker gradients independently in numpy, starting from the chief's initial values. Every
worker's final variables must match it (so every replica also started from the chief's values,
unseeded initializers notwithstanding), and global_step must equal the number of steps.
"""

from __future__ import annotations

import pytest

from tests.support.oracle import ORACLE_BUILDERS, train_and_compare

pytestmark = pytest.mark.integration

# One PS-family and one all-reduce case per model kind, crosswise; every builder and model with
# per-worker data: test_oracle_matrix (-m full).
@pytest.mark.parametrize("model,strategy", [("dense", "AllReduce"), ("sparse", "PSLoadBalancing")])
def test_averaging_per_worker_data(tmp_path, spec_file, strategy, model):
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker")


@pytest.mark.parametrize("strategy,model,options", [
    ("PartitionedPS", "sparse", ()),
    pytest.param("UnevenPartitionedPS", "dense", (), marks=pytest.mark.full),  # PartitionedPS's kernel, other sizes
    ("Parallax", "sparse", ()),
    ("PartitionedAR", "sparse", ()),
    ("RandomAxisPartitionAR", "dense", ()),  # w [4, 3] is cut on axis 1 with seed 0
    ("PS", "sparse", ("local_proxy=true",)),
])
def test_averaging_strategy_library(tmp_path, spec_file, strategy, model, options):
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", *options)


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
    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer)


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
