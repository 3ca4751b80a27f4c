"""The averaging oracle over the rows' rounds, on three namespace hosts (one worker and one PS each).

The one-host oracles of tests/integration/test_oracles.py put every PS task on the worker's own
host; the rows' rounds (adrun/runtime/kernels/exchange_rounds.py: a worker's row gathers and
sparse pushes go to one host's PS task after another) are built between other hosts' tasks, so
only a multi-host run has them all. Three plans put rows on each host's PS task, so each worker's
rows to the two other hosts go in two rounds (its own host's rows in none), whose waits the job's
workers write out (`--graph`) and the test reads:

- `tables`: Parallax puts oracle_model.py's three equal embeddings (`--model tables`) one on each
  host's PS task, the dense layer all-reduced: the rounds order three lookups.
- `sharded-mix`: Auto's plan on the benchmark's embed workload (docs/performance.md), one embedding
  split into shards on several hosts' PS tasks and the dense layers all-reduced, here as a user
  would write it: Parallax's plan of `--model sparse` with the embedding edited into 3 shards, shard
  k on PS task k. The rounds order the shards of one lookup (each shard's gather waits for the
  previous round's, all gathers reading one ids placeholder) and their sparse pushes.
- `PartitionedPS`: every variable split over the PS tasks, the dense layer too. `rows_only` holds
  here (the layer's shards are a few bytes, below `ps_sync.BATCH_BELOW_BYTES`), so its rows go in
  rounds; on the embed workload its layer's shards are large and PartitionedPS gets no rounds at
  all (tests/unit/adrun/runtime/kernels/test_exchange_rounds.py `test_rows_only_plans`).

These plans set `pool_bags: false`, so their lookups move rows. The same sharded mix with its bags
pooled on the PS tasks (`test_pooled_lookup_across_hosts`) moves per-example sums in no round.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adrun.runtime.kernels.exchange_rounds import rows_only
from adrun.strategies.document import Strategy
from bench.cluster.network import write_adrun_spec
from tests.cluster.netns import NetnsCluster
from tests.support.exchange_waits import ps_task, pull_waits, push_waits, written_graph
from tests.support.oracle import train_and_compare

pytestmark = pytest.mark.cluster
HOSTS = 3


def _by_name(plan: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in plan["variables"] if v["name"] == name)


def _rows_not_pooled(plan: dict[str, Any]) -> None:
    """`pool_bags: false` on every PS synchronizer: the lookups move rows, which the rounds order
    (pooled, they would move per-example sums and get no rounds: runtime/kernels/pooled_bags.py)."""
    for variable in plan["variables"]:
        for sync in variable["partition"]["shards"] if variable.get("partition") else [variable["sync"]]:
            if sync["kind"] == "ps":
                sync["pool_bags"] = False


def _rows_only_with_shard_k_on_task_k(plan: dict[str, Any]) -> None:
    """The plan as run: the embedding's shard k on PS task k, so the waits below name shards, and
    the plan's PS traffic is rows only, so the rounds apply."""
    _rows_not_pooled(plan)
    shards = _by_name(plan, "emb")["partition"]["shards"]
    assert [(s["kind"], s["ps_task"]) for s in shards] == [("ps", k) for k in range(HOSTS)]
    assert rows_only(Strategy.model_validate(plan))


def _each_table_on_its_own_task(plan: dict[str, Any]) -> None:
    """The plan as run: Parallax puts each of the three tables on a PS task of its own, so every
    host's PS task holds rows and each worker's rows to the two other hosts go in two rounds, and the
    plan's PS traffic is rows only, so the rounds apply."""
    tasks = [(_by_name(plan, f"emb{k}")["sync"]["kind"], _by_name(plan, f"emb{k}")["sync"].get("ps_task"))
             for k in range(HOSTS)]
    assert sorted(tasks) == [("ps", k) for k in range(HOSTS)], f"the tables' PS tasks are no longer one each: {tasks}"
    _rows_not_pooled(plan)
    assert rows_only(Strategy.model_validate(plan))


def _embedding_in_shards(plan: dict[str, Any]) -> None:
    """Parallax's plan (the embedding whole on PS task 0, `w` all-reduced) edited into a mix: the
    embedding in 3 shards on axis 0, shard k on PS task k, `w` still all-reduced."""
    emb = _by_name(plan, "emb")
    whole = emb.pop("sync")
    emb["partition"] = {"axis": 0, "shards": [{**whole, "ps_task": k} for k in range(HOSTS)]}
    assert _by_name(plan, "w")["sync"]["kind"] == "allreduce"


def _shard_the_embedding(plan: dict[str, Any]) -> None:
    """The embedding in 3 shards (`_embedding_in_shards`), its lookups moving rows in rounds."""
    _embedding_in_shards(plan)
    _rows_only_with_shard_k_on_task_k(plan)


# strategy, oracle_model.py --model, edit (or check) of the built plan; with each, PS task k holds one table or shard k
PLANS: dict[str, tuple[str, str, Callable[[dict[str, Any]], None] | None]] = {
    "tables": ("Parallax", "tables", _each_table_on_its_own_task),
    "sharded-mix": ("Parallax", "sparse", _shard_the_embedding),
    "PartitionedPS": ("PartitionedPS", "sparse", _rows_only_with_shard_k_on_task_k),
}


# each case is one 3-host job, about 45-90 s here at load 4-9, so the default suite takes one: the
# sharded mix with SGD, the path of Auto's plan on the embed benchmark (the shards of one lookup in
# rounds and the chain across hosts); separate tables, Adam (its slots on the PS tasks beside the
# rows, its beta powers on the workers) and PartitionedPS in -m full
@pytest.mark.parametrize("netns_cluster", [HOSTS], indirect=True)
@pytest.mark.parametrize(("plan", "optimizer"), [
    pytest.param("tables", "sgd", marks=pytest.mark.full),
    pytest.param("tables", "adam", marks=pytest.mark.full),
    ("sharded-mix", "sgd"),
    pytest.param("sharded-mix", "adam", marks=pytest.mark.full),
    pytest.param("PartitionedPS", "sgd", marks=pytest.mark.full),
])
def test_rows_in_rounds_across_hosts(netns_cluster: NetnsCluster, tmp_path: Path, plan: str, optimizer: str) -> None:
    """Per-worker data, 3 steps: every worker's final variables (an embedding's shards put back
    together) equal the plain reference of synchronous data-parallel training over the three
    workers' batches (tests/support/oracle.py), and every worker's rewritten graph, as the job's
    worker wrote it, has the rounds' waits.

    Fails on: a final value off the reference, as a round's control dependency that made a
    gather read a table or shard on the wrong side of a step's update, or a push that reached its
    accumulator twice, would give (a round that never starts fails the run by its operation
    timeout); and on rounds missing on several hosts: a change to `exchange_order`,
    `round_order`, `order_pulls` or `ps_aggregations` that sends a worker's rows to every host at
    once leaves its waits `{}` where the chain is asserted (checked with `round_order` returning
    []: each of `tables`, `sharded-mix` and `PartitionedPS` with SGD failed with
    `assert {} == {2: {1}}` for w0's gathers)."""
    strategy, model, edit = PLANS[plan]

    def spec_file(workers: int, ps: int) -> Path:
        assert (workers, ps) == (HOSTS, HOSTS)
        return write_adrun_spec(netns_cluster, HOSTS, tmp_path / "cluster.yml")

    train_and_compare(tmp_path, spec_file, strategy, model, "per-worker", optimizer=optimizer,
                      edit_plan=edit, workers=HOSTS, ps=HOSTS, script_options=("--graph",))
    for w in range(HOSTS):
        # worker w and PS task w run on host w + 1; PS task k holds one table (tables) or emb's shard k
        graph = written_graph(tmp_path / "out" / f"w{w}.graph.pb")
        first, second = (w + 1) % HOSTS, (w + 2) % HOSTS  # the other hosts, from the one after w's own
        # the second other host's rows wait for the first's; the own host's (PS task w) are in no
        # round, gathered and pushed at once: they cross no link
        chain = {second: {first}}
        assert pull_waits(graph) == chain, f"w{w}: which PS task's row gathers wait for which"
        assert push_waits(graph) == chain, f"w{w}: which PS task's sparse pushes wait for which"


@pytest.mark.parametrize("netns_cluster", [HOSTS], indirect=True)
def test_pooled_lookup_across_hosts(netns_cluster: NetnsCluster, tmp_path: Path) -> None:
    """The embedding in 3 shards, one on each host's PS task, its bags pooled there
    (runtime/kernels/pooled_bags.py: per-example sums back, d(sum) out, the gradient rows formed on
    each PS task), `w` all-reduced: per-worker data, 3 steps, every worker's final variables equal
    the plain reference of synchronous data-parallel training, and every worker's graph pools the
    lookup on all 3 shards with no rounds (pooled traffic is not ordered).

    Fails on: a partial sum or a gradient row formed on the wrong shard, from another worker's ids,
    or applied twice (a final value off the reference), and on the lookup left on the rows path or
    pooled traffic put in rounds."""
    def spec_file(workers: int, ps: int) -> Path:
        assert (workers, ps) == (HOSTS, HOSTS)
        return write_adrun_spec(netns_cluster, HOSTS, tmp_path / "cluster.yml")

    train_and_compare(tmp_path, spec_file, "Parallax", "sparse", "per-worker", edit_plan=_embedding_in_shards,
                      workers=HOSTS, ps=HOSTS, script_options=("--graph",))
    for w in range(HOSTS):
        graph = written_graph(tmp_path / "out" / f"w{w}.graph.pb")
        pooled = {ps_task(op) for op in graph.get_operations()
                  if op.type == "ResourceGather" and op.name.startswith("adrun_pooled_lookup")}
        assert pooled == set(range(HOSTS)), f"w{w}: the PS tasks whose shard's bags are pooled"
        assert pull_waits(graph) == {} and push_waits(graph) == {}, f"w{w}: pooled traffic in rounds"
