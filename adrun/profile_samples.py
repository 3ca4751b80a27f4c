"""What a profiling process hands back to the launcher: the graph and the raw measurements.

The hook writes this file (`adrun/runtime/profiler.py`) and the launcher turns it into a
`ModelProfile` or a UserError (`adrun/profile/run.py`): the process only records what happened, the
launcher judges whether it is enough, so every refusal is worded in one place. Like the GraphItem
capture hands back, it sits below both ends: the runtime imports nothing of the CLI's side.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from adrun.graph_item import GraphItem


class ProfileSamples(BaseModel):
    model_config = ConfigDict(extra="forbid")

    graph: GraphItem  # the training graph (or, with no training step, the last Session's graph)
    training_steps: int = Field(ge=0)  # training steps the script ran in the profiling process
    examples: int | None = None  # examples in a step's feed (or Keras batch), when it has one
    step_s: list[float] = []  # seconds of each timed step (warm-up and counting steps excluded)
    rows: dict[str, list[int]] = {}  # by variable: distinct rows its gradient held, per counted step
    # by variable: per counted step, those rows counted in each slice of its axis 0 (RowsTouched.by_range)
    rows_by_slice: dict[str, list[list[int]]] = {}


def save_samples(samples: ProfileSamples, path: str | Path) -> None:
    Path(path).write_text(samples.model_dump_json())


def load_samples(path: str | Path) -> ProfileSamples:
    return ProfileSamples.model_validate_json(Path(path).read_text())
