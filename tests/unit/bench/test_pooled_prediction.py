"""bench/pooled_prediction.py's pieces that do not capture a script: a plan's summary and the
ranking it reports (on the embed workload's facts)."""

from __future__ import annotations

import pytest

from adrun.strategies.facts import ModelProfile, RowsTouched
from bench.pooled_prediction import plan_summary, ranking, render
from tests.support.cost_facts import embed_graph


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
    # the busiest host's bytes, as adrun profile's scaling points (test_scaling's figure by hand)
    assert pooled["builders"]["PartitionedPS"]["sent_mb_per_host"] == pytest.approx(1_975_116 / 1e6, abs=1e-9)
    text = render([{"workload": "embed", "profile": "commodity", "hosts": 4, "compute_s": 0.0055,
                    "pooled_facts": {"embedding": {"examples": 256, "ids": 8192}}, "rows": rows, "pooled": pooled}], "cmd")
    line = next(row for row in text.splitlines() if row.startswith("| PartitionedPS |")).split(" | ")
    assert (line[3], line[6]) == ("3.30", "1.98")  # MB sent by the busiest host, rows and pooled
    assert "MB sent, busiest host" in text and "| Auto / PartitionedPS | " in text
