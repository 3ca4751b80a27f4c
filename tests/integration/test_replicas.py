"""In-graph replication (one replica per local device inside a worker) against the oracles.

Each worker's batch is split across its replicas along the first axis, uneven remainders
included (oracle_model.py's batch of 8 over 3 replicas is 3+3+2), and replicas are weighted by
their share of the batch. So the result must equal data-parallel SGD over the workers' whole
batches, whatever the replica counts, also when workers have different numbers of replicas.
The log line proves the replicas were built; tests/unit/adrun/runtime/kernels/test_replication.py proves they run on
their own devices and compute their own slices. tf_keras `Model.fit` with replicas is in
test_keras_fit.py.
"""

from __future__ import annotations

import pytest

from tests.support.oracle import NUM_WORKERS, ORACLE_BUILDERS, train_and_compare

pytestmark = pytest.mark.integration


def _assert_replicas(output: str, counts: list[int]) -> None:
    for w, count in enumerate(counts):
        assert f"worker {w}: {count} in-graph replicas" in output, output


@pytest.mark.parametrize("strategy,model,replicas,optimizer", [
    ("AllReduce", "sparse", 3, "sgd"),  # 8 rows -> 3+3+2 per worker; sparse rows all-gathered
    pytest.param("PSLoadBalancing", "dense", 2, "sgd", marks=pytest.mark.full),
    pytest.param("PS", "lstm", 2, "momentum", marks=pytest.mark.full),  # a tf.while_loop inside the replicated step
])
def test_replicas_match_the_oracle(tmp_path, spec_file, strategy, model, replicas, optimizer):
    result = train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer,
                               replicas=replicas)
    _assert_replicas(result.output, [replicas] * NUM_WORKERS)


def test_uneven_replica_counts_across_workers_from_an_edited_document(tmp_path, spec_file):
    """Worker 0 runs 3 replicas, worker 1 one: each worker's batch still counts once."""
    def edit(plan):
        plan["replica_devices"] = [["CPU:0", "CPU:1", "CPU:2"], ["CPU:0"]]

    result = train_and_compare(tmp_path, spec_file, "PS", "sparse", "per-worker", edit_plan=edit)
    _assert_replicas(result.output, [3])
    assert "worker 1:" not in result.output.replace("worker 1 done", "")


@pytest.mark.full
@pytest.mark.parametrize("strategy", ORACLE_BUILDERS)
@pytest.mark.parametrize("model", ["dense", "sparse", "keras", "mts", "while", "lstm"])
def test_replica_matrix(tmp_path, spec_file, strategy, model):
    optimizer = "adam" if model in ("while", "lstm") else "sgd"
    result = train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer, replicas=3)
    _assert_replicas(result.output, [3] * NUM_WORKERS)
