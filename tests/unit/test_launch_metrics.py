"""Metric lines and throughput."""

from __future__ import annotations

import pytest

from adrun.launch.job.metrics import Throughput, parse_metric_line

pytestmark = pytest.mark.timeout(10)


def test_parse_metric_line():
    assert parse_metric_line('@@ADRUN {"event": "step", "step": 3}') == {"event": "step", "step": 3}
    assert parse_metric_line("step 3") is None
    assert parse_metric_line("@@ADRUN not json") is None
    assert parse_metric_line("@@ADRUN [1, 2]") is None


def test_rates_exclude_start_up_and_sum_over_workers():
    t = Throughput()
    t.record(0, {"event": "step", "step": 5, "time": 100.0, "examples": 32})
    assert t.workers[0].steps_per_s is None  # one report: no interval yet
    t.record(0, {"event": "step", "step": 25, "time": 104.0, "examples": 32})
    t.record(1, {"event": "step", "step": 1, "time": 500.0, "examples": None})
    t.record(1, {"event": "step", "step": 31, "time": 510.0, "examples": None})

    assert t.workers[0].steps == 25
    assert t.workers[0].steps_per_s == pytest.approx(5.0)
    assert t.workers[0].examples_per_s == pytest.approx(160.0)
    assert t.workers[1].examples_per_s is None
    assert t.steps_per_s == pytest.approx(8.0)
    assert t.examples_per_s == pytest.approx(160.0)


def test_malformed_and_unknown_events_are_ignored():
    t = Throughput()
    t.record(0, {"event": "step", "step": "3", "time": 1.0})
    t.record(0, {"event": "other", "step": 3, "time": 1.0})
    assert t.workers == {} and t.steps_per_s is None and t.examples_per_s is None
