"""The workers' `@@ADRUN {json}` metric lines (protocol: docs/architecture.md) and the throughput
read from them.

The line format is defined here, once: the runtime writes its lines with `format_metric_line`
(this module imports nothing of adrun, so every task can import it) and the supervisor reads them
with `parse_metric_line`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

METRIC_PREFIX = "@@ADRUN "


def format_metric_line(event: dict[str, Any]) -> str:
    """The line (with its newline) that carries `event` from a worker to the launcher."""
    return METRIC_PREFIX + json.dumps(event) + "\n"


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The event of a metric line; None for any other line (including a malformed metric line,
    which is then shown like ordinary output rather than silently dropped)."""
    if not line.startswith(METRIC_PREFIX):
        return None
    try:
        event = json.loads(line[len(METRIC_PREFIX) :])
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


@dataclass
class WorkerRate:
    """One worker's progress: cumulative steps at its first and latest report.

    The rate is measured from the first report on, so start-up (graph building, connecting to
    the PS) does not dilute it.
    """

    first_step: int
    first_time: float
    steps: int
    last_time: float
    examples: int | None = None  # per step, when the worker knows its batch size
    wire_bytes: int = 0  # bytes per step this worker hands to dense all-reduces

    @property
    def steps_per_s(self) -> float | None:
        elapsed = self.last_time - self.first_time
        return (self.steps - self.first_step) / elapsed if elapsed > 0 else None

    @property
    def examples_per_s(self) -> float | None:
        rate = self.steps_per_s
        return rate * self.examples if rate is not None and self.examples else None


@dataclass
class Throughput:
    """Per-worker rates (keyed by worker index) and their cluster totals."""

    workers: dict[int, WorkerRate] = field(default_factory=dict)

    def record(self, worker: int, event: dict[str, Any]) -> None:
        """Take in one event of `worker`; events other than well-formed `step` ones are ignored."""
        step, when, examples = event.get("step"), event.get("time"), event.get("examples")
        if event.get("event") != "step" or not isinstance(step, int) or not isinstance(when, (int, float)):
            return
        rate = self.workers.setdefault(worker, WorkerRate(step, float(when), step, float(when)))
        rate.steps, rate.last_time = step, float(when)
        if isinstance(examples, int):
            rate.examples = examples
        if isinstance(event.get("wire_bytes"), int):
            rate.wire_bytes = event["wire_bytes"]

    @property
    def steps_per_s(self) -> float | None:
        """Sum of the workers' rates; None until some worker has reported twice."""
        rates = [r.steps_per_s for r in self.workers.values() if r.steps_per_s is not None]
        return sum(rates) if rates else None

    @property
    def examples_per_s(self) -> float | None:
        """Sum of the workers' example rates; None while no worker's batch size is known."""
        rates = [r.examples_per_s for r in self.workers.values() if r.examples_per_s is not None]
        return sum(rates) if rates else None
