"""bench/cluster/touched_rows.py: distinct rows per step from the workloads' own batches."""

from __future__ import annotations

from adrun.strategies.document import Partition, PSSync, Strategy, VariablePlan
from bench.cluster.touched_rows import distinct_rows
from bench.paths import WORKLOADS_DIR


def _plan(variables: list[VariablePlan]) -> Strategy:
    return Strategy(version=1, builder="hand", fingerprint="f", num_workers=2, num_ps=2, variables=variables)


def _sparse(name: str, rows: int, shards: int = 1) -> VariablePlan:
    if shards == 1:
        return VariablePlan(name=name, shape=[rows, 8], dtype="float32", grad="sparse", sync=PSSync(ps_task=0))
    return VariablePlan(name=name, shape=[rows, 8], dtype="float32", grad="sparse",
                        partition=Partition(axis=0, shards=[PSSync(ps_task=i % 2) for i in range(shards)]))


def test_zipf_bags_touch_fewer_rows_than_lookups_and_shards_add_up():
    whole = distinct_rows(WORKLOADS_DIR, "sparse", _plan([_sparse("embedding", 200_000)]))
    split = distinct_rows(WORKLOADS_DIR, "sparse", _plan([_sparse("embedding", 200_000, shards=3)]))
    lookups = 128 * 20
    assert set(whole) == {"embedding"} and set(split) == {f"embedding/part_{i}" for i in range(3)}
    for worker in (0, 1):
        assert 0 < whole["embedding"][worker] < lookups / 2  # Zipf ids repeat: duplicates are not rows
        # every distinct id lies in exactly one shard (each shard's mean is rounded on its own)
        assert abs(sum(split[f"embedding/part_{i}"][worker] for i in range(3)) - whole["embedding"][worker]) <= 2
        assert split["embedding/part_0"][worker] > split["embedding/part_2"][worker]  # low ids are the popular ones
    assert whole["embedding"][0] != whole["embedding"][1]  # each worker's own data


def test_ncf_uniform_users_and_zipf_items():
    rows = distinct_rows(WORKLOADS_DIR, "ncf", _plan([_sparse("user_embedding", 100_000), _sparse("item_embedding", 20_000)]))
    batch = 256
    for worker in (0, 1):
        assert batch - 5 <= rows["user_embedding"][worker] <= batch  # uniform over 100,000: rarely a repeat
        assert rows["item_embedding"][worker] < 0.75 * batch  # popular items repeat within a batch


def test_dense_workload_has_no_sparse_rows():
    assert distinct_rows(WORKLOADS_DIR, "dense", _plan([_sparse("embedding", 10)])) == {}


def test_embed_touches_nearly_every_lookup_and_even_shards():
    whole = distinct_rows(WORKLOADS_DIR, "embed", _plan([_sparse("embedding", 1_000_000)]))
    split = distinct_rows(WORKLOADS_DIR, "embed", _plan([_sparse("embedding", 1_000_000, shards=4)]))
    lookups = 256 * 32
    for worker in (0, 1):
        # uniform ids over a million rows: about lookups * (1 - lookups / 2e6) distinct, 8,159 here
        assert 0.98 * lookups < whole["embedding"][worker] <= lookups
        quarters = [split[f"embedding/part_{i}"][worker] for i in range(4)]
        assert max(quarters) < 1.1 * min(quarters)  # no hot shard


def test_keras_workloads_touch_the_rows_of_their_graph_twins():
    """A Keras workload's embedding has Keras's variable name (as TF2 mode's plans give it) and the
    graph-mode twin's data, so the same rows; the transformer reads every token of its sequences."""
    twin = distinct_rows(WORKLOADS_DIR, "sparse", _plan([_sparse("embedding", 200_000)]))
    keras = distinct_rows(WORKLOADS_DIR, "sparse_keras", _plan([_sparse("sequential/embedding/embeddings", 200_000)]))
    assert keras == {"sequential/embedding/embeddings": twin["embedding"]}
    ncf = distinct_rows(WORKLOADS_DIR, "ncf_keras", _plan([_sparse("user_embedding/embeddings", 100_000),
                                                        _sparse("item_embedding/embeddings", 20_000)]))
    assert list(ncf.values()) == list(distinct_rows(WORKLOADS_DIR, "ncf", _plan([_sparse("user_embedding", 100_000),
                                                                            _sparse("item_embedding", 20_000)])).values())
    tokens = distinct_rows(WORKLOADS_DIR, "transformer_keras", _plan([_sparse("tokens/embeddings", 8000)]))["tokens/embeddings"]
    assert all(1500 < rows < 32 * 64 for rows in tokens)  # 2,048 uniform draws from 8,000: some repeat
