"""The throughput of a job, read from its workers' step events (`adrun.task_events.StepEvent`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adrun.task_events import StepEvent


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

    def record(self, worker: int, event: StepEvent) -> None:
        """Take in one step report of `worker`."""
        rate = self.workers.setdefault(worker, WorkerRate(event.step, event.time, event.step, event.time))
        rate.steps, rate.last_time, rate.wire_bytes = event.step, event.time, event.wire_bytes
        if event.examples is not None:
            rate.examples = event.examples

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
