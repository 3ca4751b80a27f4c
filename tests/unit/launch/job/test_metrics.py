"""Task events (adrun/task_events.py) and the throughput read from them."""

from __future__ import annotations

import pytest

from adrun.launch.job.metrics import Throughput
from adrun.task_events import (
    EVENT_PREFIX, CapturedEvent, DoneEvent, ErrorEvent, RefusalEvent, StepEvent, WaitingEvent, decode, encode,
)

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize("event", [
    StepEvent(3, 1700000000.25, examples=32, wire_bytes=4096),
    StepEvent(1, 5.0),
    WaitingEvent(7, 12.5, since=10.0),
    DoneEvent("/tmp/found.json"),
    CapturedEvent("/tmp/found.json"),
    ErrorEvent("tensorflow.python.framework.errors_impl.UnavailableError", "Socket closed\nline two",
               tf_error="UnavailableError"),
    ErrorEvent("ValueError", "bad batch"),
    RefusalEvent("the graph's fingerprint differs from the plan's: été"),
])
def test_an_event_is_one_line_and_decodes_equal(event):
    line = encode(event)
    assert line.startswith(EVENT_PREFIX) and line.endswith("\n") and line.count("\n") == 1
    assert decode(line.rstrip("\n")) == event


def test_the_step_events_text_is_unchanged():
    """What earlier runtimes wrote (a step report) still decodes: the wire format is the same."""
    assert decode('@@ADRUN {"event": "step", "step": 3, "time": 2, "examples": null, "wire_bytes": 8}') == \
        StepEvent(3, 2.0, None, 8)
    assert encode(StepEvent(3, 2.0, None, 8)) == \
        '@@ADRUN {"event": "step", "step": 3, "time": 2.0, "examples": null, "wire_bytes": 8}\n'


@pytest.mark.parametrize("line", [
    "step 3",
    "@@ADRUN not json",
    "@@ADRUN [1, 2]",
    '@@ADRUN {"event": "other", "step": 3}',
    '@@ADRUN {"event": "step", "step": "3", "time": 1.0}',
    '@@ADRUN {"event": "step", "step": true, "time": 1.0}',
    '@@ADRUN {"event": "step", "time": 1.0}',
    '@@ADRUN {"event": "waiting", "step": 1, "time": 2.0}',
    '@@ADRUN {"event": "error", "exception": "ValueError", "message": 3}',
    '@@ADRUN {"event": "refusal"}',
])
def test_what_is_no_event_decodes_to_none(line):
    assert decode(line) is None


def test_an_errors_name_drops_its_module():
    assert ErrorEvent("tensorflow.python.framework.errors_impl.AbortedError", "").name == "AbortedError"
    assert ErrorEvent("KeyboardInterrupt", "").name == "KeyboardInterrupt"


def test_rates_exclude_start_up_and_sum_over_workers():
    t = Throughput()
    t.record(0, StepEvent(5, 100.0, examples=32))
    assert t.workers[0].steps_per_s is None  # one report: no interval yet
    t.record(0, StepEvent(25, 104.0, examples=32))
    t.record(1, StepEvent(1, 500.0))
    t.record(1, StepEvent(31, 510.0))

    assert t.workers[0].steps == 25
    assert t.workers[0].steps_per_s == pytest.approx(5.0)
    assert t.workers[0].examples_per_s == pytest.approx(160.0)
    assert t.workers[1].examples_per_s is None
    assert t.steps_per_s == pytest.approx(8.0)
    assert t.examples_per_s == pytest.approx(160.0)
