"""The averaging oracle over the rows' rounds, on three namespace hosts (one worker and one PS each).

The one-host oracles of tests/integration/test_oracles.py put every PS task on the worker's own
host; the rows' rounds (adrun/runtime/kernels/exchange_rounds.py: a worker's row gathers and
sparse pushes go to one host's PS task after another) are built between other hosts' tasks, so
only a multi-host run has them all. Here Parallax puts oracle_model.py's three equal embeddings
one on each host's PS task (its dense layer all-reduced): each worker's rows to the two other
hosts go in two rounds (its own host's rows in none), whose waits the job's workers write out
(`--graph`) and the test reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.netns import NetnsCluster, every_host_spec
from tests.support.exchange_waits import pull_waits, push_waits, written_graph
from tests.support.oracle import train_and_compare

pytestmark = pytest.mark.cluster
HOSTS = 3


# Adam (its slots on the PS tasks beside the rows, its beta powers on the workers) in -m full: each
# case is one 3-host job, about 45-50 s here at load 9, so the default suite takes SGD only
@pytest.mark.parametrize("netns_cluster", [HOSTS], indirect=True)
@pytest.mark.parametrize("optimizer", ["sgd", pytest.param("adam", marks=pytest.mark.full)])
def test_parallax_rows_in_rounds_across_hosts(netns_cluster: NetnsCluster, tmp_path: Path, optimizer: str) -> None:
    """Parallax, per-worker data, 3 steps: every worker's final variables equal the plain
    reference of synchronous data-parallel training over the three workers' batches
    (tests/support/oracle.py), and every worker's rewritten graph, as the job's worker wrote it,
    has the rounds' waits.

    Fails on: a final value off the reference, as a round's control dependency that made a
    gather read a table on the wrong side of a step's update, or a push that reached its
    accumulator twice, would give (a round that never starts fails the run by its operation
    timeout); and on rounds missing on several hosts: a change to `exchange_order`,
    `round_order`, `order_pulls` or `ps_aggregations` that sends a worker's rows to every host at
    once leaves its waits `{}` where the chain is asserted (checked while the own host's task was
    still last in the chain: `round_order` returning [] failed with `assert {} == {2: {1}, 0: {2}}`
    for w0)."""
    def spec_file(workers: int, ps: int) -> Path:
        assert (workers, ps) == (HOSTS, HOSTS)
        return every_host_spec(tmp_path / "cluster.yml", netns_cluster)

    train_and_compare(tmp_path, spec_file, "Parallax", "tables", "per-worker", optimizer=optimizer,
                      workers=HOSTS, ps=HOSTS, script_options=("--graph",))
    for w in range(HOSTS):
        # worker w and PS task w run on host w + 1; Parallax puts emb<k> on PS task k
        graph = written_graph(tmp_path / "out" / f"w{w}.graph.pb")
        first, second = (w + 1) % HOSTS, (w + 2) % HOSTS  # the other hosts, from the one after w's own
        # the second other host's rows wait for the first's; the own host's (PS task w) are in no
        # round, gathered and pushed at once: they cross no link
        chain = {second: {first}}
        assert pull_waits(graph) == chain, f"w{w}: which PS task's row gathers wait for which"
        assert push_waits(graph) == chain, f"w{w}: which PS task's sparse pushes wait for which"
