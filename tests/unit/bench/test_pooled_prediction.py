"""bench/pooled_prediction.py's pieces that do not capture a script: a graph without its pooled
facts (bench/cost_model_check.py's), a plan's summary, and the ranking it reports (on the embed
workload's facts)."""

from __future__ import annotations

from adrun.strategies.facts import ModelProfile, RowsTouched
from bench.cost_model_check import without_pooled
from bench.pooled_prediction import plan_summary, ranking
from tests.support.cost_facts import embed_graph


def test_without_pooled_is_the_graph_as_captured_before():
    assert without_pooled(embed_graph()) == embed_graph(pooled=False)


def test_ranking_of_the_embed_workload_at_4_hosts():
    """Without pooled facts Auto shards the table over the 4 PS tasks; with them, pulling 4 partial
    sums a worker costs more than the one of a whole table, which Parallax's plan keeps on ps0."""
    profile = ModelProfile(graph=embed_graph(pooled=False), compute_s=0.0055, steps_measured=10,
                           rows_touched={"embedding": RowsTouched(mean=8160, max=8200)})
    rows, rows_plan = ranking(profile, 4, "commodity")
    assert plan_summary(rows_plan) == "embedding: 4 shards on ps0,1,2,3; 6 all-reduced"
    pooled, pooled_plan = ranking(profile.model_copy(update={"graph": embed_graph()}), 4, "commodity", rows_plan)
    assert plan_summary(pooled_plan) == "embedding: ps0; 6 all-reduced"
    assert pooled["other_plan"]["sent_mb_per_host"] < rows["builders"]["Auto"]["sent_mb_per_host"]
    assert rows["auto_over_all_reduce"] < pooled["auto_over_all_reduce"]
    assert pooled["builders"]["AllReduce"] == rows["builders"]["AllReduce"]
