"""Launching side of the profiling run: what one process of the script measures in a few steps.

`profile_model` runs the unmodified script once, as worker 0 of `num_workers` (so a script that
sizes its batch by ADRUN_NUM_WORKERS profiles a worker's batch), with ADRUN_MODE=profile, as
capture_run.CaptureThenProfile does (a first start under Auto asks it for the graph first, and the
profile only when no plan is remembered). The hook
(`adrun/runtime/profiler.py`) lets it train on one process with its own plain local Sessions, for
`warmup` + `steps` training steps, then the process writes what it measured and ends, however long
the script would have trained. A TF2 script is timed at its optimizer's applies instead
(adrun/runtime/tf2/profiler.py), into the same ProfileSamples; what follows holds for both, with
the TF2 step's bounds its applies (docs/profiling.md, "TF2 scripts").

Measured:
- `compute_s`: the median time of the timed steps at the script's batch size; a step lasts from the
  start of its `Session.run` (or Keras callable) to the start of the next training step, so the
  script's own work between steps counts. Warm-up steps are not timed.
- `rows_touched`: for each variable with sparse gradients, the distinct ids in its gradient per
  step (mean and max), counted with `tf.unique` in the step's own `run`. Those counting steps are
  not timed: with sparse variables every other step counts and the others are timed, so `steps`
  gives about `steps / 2` timed steps; without, all `steps` are timed.
Static facts (variables, shapes, dense/sparse, optimizer, batch size) are the GraphItem that capture
describes; when the graph does not fix the batch size (placeholders), the first step's feed (or
Keras batch) gives it.

No trace: the profiling run saves no checkpoint (`Saver.save` writes nothing) and writes its events
files and graphs into a temporary directory deleted afterwards (`adrun/runtime/no_trace.py`), so a
MonitoredTrainingSession or Saver of the real run finds no profiling checkpoint to resume from.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from adrun.capture_run import CaptureThenProfile, require_training_op
from adrun.errors import UserError
from adrun.graph_item import GraphItem
from adrun.profile_samples import ProfileSamples
from adrun.strategies.facts import ModelProfile, RowsTouched

DEFAULT_STEPS = 20
DEFAULT_WARMUP = 4
MAX_STEPS = 100_000  # a profile needs tens of steps; more is a mistake, not a wish


def profile_model(
    script: Path,
    script_args: list[str],
    num_workers: int,
    job_id: str,
    steps: int = DEFAULT_STEPS,
    warmup: int = DEFAULT_WARMUP,
    python: str = sys.executable,
) -> ModelProfile:
    """Profile `script` on one process (see the module's docstring).

    Raises UserError when the script fails, is refused by adrun's hook, trains nothing adrun sees
    (neither a Session's optimizer step nor a Keras or tf_keras optimizer apply), has no training op, does not finish within CAPTURE_TIMEOUT_S, or ends before any timed step
    (a script that ends earlier than `warmup + steps` steps is profiled on the steps it ran).
    """
    if not 1 <= steps <= MAX_STEPS:
        raise UserError(f"profiling steps: {steps}; give 1 to {MAX_STEPS}")
    if not 0 <= warmup <= MAX_STEPS:
        raise UserError(f"profiling warm-up steps: {warmup}; give 0 to {MAX_STEPS}")
    with CaptureThenProfile(script, script_args, num_workers, job_id, (warmup, steps), python=python) as run:
        samples = run.profile_samples()
    return profile_of(script, samples, warmup)


class NoStepTimed(UserError):
    """The script ended before any timed step. `graph` is what was captured, so that a planner can
    still plan from the model's facts (adrun/gathering.py); `fact` says what happened, without the
    advice the error adds."""

    def __init__(self, fact: str, advice: str, graph: GraphItem) -> None:
        super().__init__(f"{fact}; {advice}")
        self.fact, self.graph = fact, graph


def profile_of(script: Path, samples: ProfileSamples, warmup: int) -> ModelProfile:
    """The ModelProfile of what a profiling process measured (`profile_model`'s, or a first start's
    one process, capture_run.CaptureThenProfile); UserError when its graph has no training op,
    NoStepTimed when no step was timed."""
    graph = require_training_op(script, samples.graph)
    if graph.batch_size is None and samples.examples:
        graph = graph.model_copy(update={"batch_size": samples.examples})
    if not samples.step_s:
        raise NoStepTimed(
            f"{script}: ran {samples.training_steps} training step(s), all of them warm-up ({warmup}), so no "
            "step was timed",
            "let it run longer (e.g. its own steps or epochs argument) or profile with fewer warm-up steps",
            graph,
        )
    sparse = [v.name for v in graph.trainable_with_grads() if v.grad == "sparse"]
    return ModelProfile(
        graph=graph,
        compute_s=statistics.median(samples.step_s),
        steps_measured=len(samples.step_s),
        rows_touched={
            name: RowsTouched(mean=statistics.fmean(samples.rows[name]), max=max(samples.rows[name]),
                              by_range=_mean_by_slice(samples.rows_by_slice.get(name, [])))
            for name in sparse if samples.rows.get(name)
        },
    )


def _mean_by_slice(per_step: list[list[int]]) -> list[float]:
    """Mean distinct rows per step in each slice; empty when the slices were not counted."""
    return [statistics.fmean(column) for column in zip(*per_step, strict=True)] if per_step else []
