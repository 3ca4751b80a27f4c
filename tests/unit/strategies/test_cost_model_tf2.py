"""The cost model prices a TF2 script's PS plans by TF2 mode's PS runtime (adrun/runtime/tf2/ps_*.py),
where it differs from graph mode's: every dense gradient of a PS task in one accumulator, and the
chief's update of a split variable whose optimizer is not element-wise."""

from __future__ import annotations

import pytest

from adrun.graph_item import GraphItem
from adrun.strategies.cost_model import PS_BATCH_BELOW_BYTES, TF2_SHARD_WISE_OPTIMIZERS, predict
from adrun.strategies.document import Partition, PSSync, Strategy
from tests.support.cost_facts import BANDWIDTH_ONLY, hosts_spec, network, plan, planned, profile, var

B = 12.5e6  # 100 Mbit/s


def _kind(strategy: Strategy, graph: GraphItem) -> Strategy:
    return Strategy.model_validate({**strategy.model_dump(), "kind": graph.kind, "keras": graph.keras})


def _graph(kind: str, variables, optimizer: str | None = None) -> GraphItem:
    keras = "keras3" if kind == "tf2" else None
    return GraphItem(kind=kind, keras=keras, variables=variables, optimizer=optimizer, batch_size=10)


def test_the_model_knows_the_optimizers_the_runtime_updates_shard_by_shard():
    import keras

    from adrun.runtime.tf2.ps_shard_updates import element_wise

    for name in TF2_SHARD_WISE_OPTIMIZERS:
        assert element_wise(getattr(keras.optimizers, name)()), name
    for name in ("Lamb", "Adafactor", "Muon"):
        assert not element_wise(getattr(keras.optimizers, name)()), name


@pytest.mark.parametrize("kind, accumulators", [("graph", 10), ("tf2", 1)])
def test_tf2_pushes_every_dense_gradient_of_a_ps_task_into_one_accumulator(kind, accumulators):
    """Ten 256 KiB gradients on ps0: graph mode gives each its own accumulator (at the batching
    threshold), TF2 mode's exchange pushes them as one flat buffer (ps_exchange.py)."""
    vs = [var(f"v{i}", [PS_BATCH_BELOW_BYTES // 4]) for i in range(10)]
    graph = _graph(kind, vs)
    spec = hosts_spec(2)
    c = BANDWIDTH_ONLY.model_copy(update={"ps_variable_overhead_s": 0.003, "variable_overhead_s": 0.001})
    strategy = _kind(plan(graph, spec, [planned(v, sync=PSSync(ps_task=0)) for v in vs]), graph)
    step = predict(strategy, profile(graph, 0.01), spec, network(spec, 1e15), c).step_s
    assert step == pytest.approx(0.01 + 10 * 0.001 + accumulators * 0.003)


@pytest.mark.parametrize("kind, optimizer, transfers", [
    ("graph", "Lamb", 2),  # reads before compute, pushes after: one shard's bytes each way, twice
    ("tf2", "SGD", 2),  # updated shard by shard on each PS (ps_shard_updates.py)
    ("tf2", "Lamb", 3),  # + the remote shard's mean to the chief and its new value back
    ("tf2", None, 3),  # an unrecorded optimizer counts as not element-wise
    ("tf2", "SGD, Adam", 2),  # a GAN's two element-wise optimizers, as the capture joins them
    ("tf2", "Adam, Lamb", 3),  # the plan does not say which one updates the variable
])
def test_a_tf2_split_variable_whose_optimizer_is_not_element_wise_is_updated_on_the_chief(kind, optimizer, transfers):
    """A 4 MB dense variable split over the PS tasks of 2 hosts: each step moves its remote half
    (2 MB) each way between the hosts once for the reads and once for the pushes; TF2 mode with
    Lamb moves it once more after the pushes, ps1's shard to the chief and back."""
    v = var("w", [1000, 1000])
    graph = _graph(kind, [v], optimizer)
    spec = hosts_spec(2)
    split = planned(v, partition=Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))
    strategy = _kind(plan(graph, spec, [split]), graph)
    step = predict(strategy, profile(graph, 0.01), spec, network(spec, B), BANDWIDTH_ONLY).step_s
    assert step == pytest.approx(0.01 + transfers * 2e6 / B)


KAPPA = 1e8  # bytes/s one CPU sends or receives between hosts, in these tests


def test_a_tf2_chief_update_on_shared_cpus_adds_its_cpu_work_to_its_phase():
    """The split 4 MB variable with Lamb on 2 namespace hosts of a 2-CPU machine: each of the three
    phases (reads, pushes, the chief's update) moves 2 MB each way between the hosts, 2·2 MB / B on
    the link plus every byte through the CPUs twice over 2 CPUs, 2·2·2 MB / (2·κ), on top."""
    v = var("w", [1000, 1000])
    graph = _graph("tf2", [v], "Lamb")
    spec = hosts_spec(2)
    split = planned(v, partition=Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))
    strategy = _kind(plan(graph, spec, [split]), graph)
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": KAPPA})
    shared = network(spec, B).model_copy(update={"shared_cpus": 2})
    prediction = predict(strategy, profile(graph, 0.01), spec, shared, c)
    assert prediction.step_s == pytest.approx(0.01 + 3 * (2e6 / B + 4e6 / KAPPA))


def test_a_tf2_chief_updates_share_counts_its_cpu_work_once():
    """Variable shares on shared CPUs: the split Lamb variable's three phases, 3 · 2 MB / B on the
    link, + 12 MB / κ through the busiest host's CPU, + 2 shards' overheads; the chief's update
    counts its link's time, not the CPUs' again (8 MB / 2κ, which is longer here). `b` (10 floats on
    ps0, read and pushed by worker 1): its overhead + 80 bytes on the link and on the CPU."""
    v, b = var("w", [1000, 1000]), var("b", [10])
    graph = _graph("tf2", [v, b], "Lamb")
    spec = hosts_spec(2)
    split = planned(v, partition=Partition(axis=0, shards=[PSSync(ps_task=0), PSSync(ps_task=1)]))
    strategy = _kind(plan(graph, spec, [split, planned(b, sync=PSSync(ps_task=0))]), graph)
    c = BANDWIDTH_ONLY.model_copy(update={"stack_bytes_per_cpu_s": KAPPA, "variable_overhead_s": 0.01})
    fast = 1e8
    shared = network(spec, fast).model_copy(update={"shared_cpus": 2})
    shares = predict(strategy, profile(graph, 0.01), spec, shared, c).variable_share
    w_s = 3 * 2e6 / fast + 12e6 / KAPPA + 2 * 0.01
    b_s = 0.01 + 80 / fast + 80 / KAPPA
    assert shares["w"] == pytest.approx(w_s / (w_s + b_s))
