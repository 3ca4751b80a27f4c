"""Fitting the cost model's coefficients to the measured step times of one cluster's trial runs.

Least squares (scipy) on the relative error of the predicted step time, one residual per usable
record, plus one residual per coefficient pulling it towards the prior (the analytical values
unless given): with few records the prior dominates, and predictions improve as records accumulate.
The factors (bandwidth, compute) are fitted in log space and the additive terms (latency,
overheads, the reverse-traffic share) as they are; the prior's weights are in docs/cost-model.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from adrun.errors import UserError

from .cost_model import Coefficients, StepCost, step_cost
from .facts import TrialRecord

# The prior's pull, as the relative step-time error one record would have to show to move a
# coefficient this far: a factor of 2 for the factors, 10 ms of message latency, of either
# per-variable overhead or of the per-PS-task overhead, or 0.25 of reverse-traffic share each weigh
# as much as a 10% error on one record.
PRIOR_ERROR = 0.1
FACTOR_SCALE = math.log(2)
SECONDS_SCALE = 1e-2
SHARE_SCALE = 0.25

_FACTORS = ("remote_bandwidth_factor", "local_bandwidth_factor", "compute_factor",
            "stack_bytes_per_cpu_s")  # fitted as logarithms
_ADDITIVE = (("message_latency_s", SECONDS_SCALE), ("variable_overhead_s", SECONDS_SCALE),
             ("ps_variable_overhead_s", SECONDS_SCALE), ("ps_task_overhead_s", SECONDS_SCALE),
             ("reverse_traffic_share", SHARE_SCALE))
_UPPER = {"reverse_traffic_share": 1.0}


@dataclass(frozen=True)
class FitResult:
    """The fitted coefficients, how many records they rest on, and the mean relative error of the
    predicted step time on those records with the prior (`error_before`) and fitted coefficients
    (`error_after`); both None when no record was usable."""

    coefficients: Coefficients
    records_used: int
    records_skipped: int  # that cannot be predicted: no profile or network facts, or facts of another cluster
    error_before: float | None
    error_after: float | None


def fit(
    records: Sequence[TrialRecord], prior: Coefficients | None = None, cluster_key: str | None = None
) -> FitResult:
    """Coefficients fitted to `records` of one cluster. With `cluster_key`, only records of that
    cluster are used; without it, the records must all be of one cluster (ValueError otherwise).
    Records that cannot be predicted (no profile or network facts, or network facts missing a pair
    of the record's hosts) are skipped and counted."""
    prior = prior or Coefficients.analytical()
    if cluster_key is not None:
        records = [r for r in records if r.cluster_key == cluster_key]
    keys = sorted({r.cluster_key for r in records})
    if len(keys) > 1:
        raise ValueError(f"records of {len(keys)} clusters ({', '.join(keys)}); fit one cluster_key at a time")
    costs: list[StepCost] = []
    steps: list[float] = []
    for r in records:
        cost = _step_cost(r)
        if cost is not None:
            costs.append(cost)
            steps.append(1.0 / r.steps_per_s)
    skipped = len(records) - len(costs)
    if not costs:
        return FitResult(prior, 0, skipped, None, None)
    measured = np.array(steps)

    def errors(c: Coefficients) -> np.ndarray:
        return _relative_errors(costs, measured, c)

    x0 = _to_vector(prior)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.concatenate([errors(_from_vector(x)), _prior_residuals(x, x0)])

    lower = [-np.inf] * len(_FACTORS) + [0.0] * len(_ADDITIVE)
    upper = [np.inf] * len(_FACTORS) + [_UPPER.get(a, np.inf) for a, _ in _ADDITIVE]
    solution = least_squares(residuals, x0, bounds=(lower, upper), x_scale=_scales(), method="trf")
    fitted = _from_vector(solution.x)
    return FitResult(
        coefficients=fitted,
        records_used=len(costs),
        records_skipped=skipped,
        error_before=float(np.mean(np.abs(errors(prior)))),
        error_after=float(np.mean(np.abs(errors(fitted)))),
    )


def _step_cost(record: TrialRecord) -> StepCost | None:
    """The record's step cost, or None when it cannot be predicted: no profile or network facts, or
    facts that do not cover its cluster (a pair of hosts never measured)."""
    if record.profile is None or record.network is None:
        return None
    try:
        return step_cost(record.strategy, record.profile, record.spec, record.network)
    except (UserError, ValueError):
        return None


def _relative_errors(costs: Sequence[StepCost], measured_step_s: np.ndarray, c: Coefficients) -> np.ndarray:
    """(predicted - measured) / measured step time, per record."""
    return np.array([cost.time(c).step for cost in costs]) / measured_step_s - 1.0


def _to_vector(c: Coefficients) -> np.ndarray:
    return np.array([math.log(getattr(c, f)) for f in _FACTORS] + [getattr(c, a) for a, _ in _ADDITIVE])


def _from_vector(x: np.ndarray) -> Coefficients:
    values = {f: math.exp(v) for f, v in zip(_FACTORS, x[: len(_FACTORS)], strict=True)}
    values |= {a: min(max(0.0, float(v)), _UPPER.get(a, math.inf))
               for (a, _), v in zip(_ADDITIVE, x[len(_FACTORS):], strict=True)}
    return Coefficients(**values)


def _scales() -> np.ndarray:
    return np.array([FACTOR_SCALE] * len(_FACTORS) + [scale for _, scale in _ADDITIVE])


def _prior_residuals(x: np.ndarray, x0: np.ndarray) -> np.ndarray:
    return PRIOR_ERROR * (x - x0) / _scales()
