"""The pieces of adrun/auto_plan.py that need no script: Auto's options from the command line and
the one line saying what the cost model was fitted on."""

from __future__ import annotations

import pytest

from adrun.auto_plan import auto_options, fit_summary
from adrun.errors import UserError
from adrun.strategies.auto import AutoOptions
from adrun.strategies.cost_model import Coefficients
from adrun.strategies.fit import FitResult


def test_auto_options_from_strategy_opts() -> None:
    assert auto_options({}) == AutoOptions()
    assert auto_options({"allow_lossy": "true", "allow_staleness": "false"}) == AutoOptions(allow_lossy=True)
    with pytest.raises(UserError, match="Auto options: allow_staleness: expected true or false, got 'sometimes'"):
        auto_options({"allow_staleness": "sometimes"})


@pytest.mark.parametrize("used,skipped,before,after,line", [
    (0, 0, None, None, "cost model: analytical coefficients (no usable records of this cluster)"),
    (0, 2, None, None, "cost model: analytical coefficients (no usable records of this cluster; "
                       "2 record(s) without a profile or network facts left out)"),
    (5, 0, 0.412, 0.087, "cost model fitted on 5 record(s) of this cluster: mean step-time error 9% "
                         "(analytical 41%)"),
    (3, 1, 0.2, 0.15, "cost model fitted on 3 record(s) of this cluster: mean step-time error 15% "
                      "(analytical 20%); 1 record(s) without a profile or network facts left out"),
])
def test_fit_summary_says_how_many_records_and_the_error(used, skipped, before, after, line) -> None:
    assert fit_summary(FitResult(Coefficients.analytical(), used, skipped, before, after)) == line
