"""Patterns of real TF1 programs under the equivalence oracle (docs/testing.md).

tests/scripts/real_patterns.py combines traits seen in public training programs (a graph of its
own, two optimizers stepped in one run, a float step counter, queue-runner input, MonitoredSession
with `run_step_fn`). Every worker reads the same data, so two synchronous workers must end with
exactly the plain run's variables and step count; the plain run must also have moved them.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun
from tests.support.paths import REPO, SCRIPTS

pytestmark = pytest.mark.integration
SCRIPT = str(SCRIPTS / "real_patterns.py")
STEPS = 4

# Two runs cover every trait in the default suite; the full matrix takes each alone.
COMBINED = [
    ("PSLoadBalancing", ("--own-graph", "--two-optimizers", "--float-step")),
    ("AllReduce", ("--queue-input", "--session", "step-fn", "--two-optimizers")),
]
SINGLE = [
    ("--own-graph",), ("--two-optimizers",), ("--float-step",), ("--queue-input",),
    ("--session", "monitored"), ("--session", "step-fn"),
]


def assert_equals_plain_run(tmp_path, spec_file, strategy: str, traits: tuple[str, ...]) -> None:
    script = [SCRIPT, *traits, "--steps", str(STEPS), "--out", str(tmp_path)]
    subprocess.run([sys.executable, *script], check=True, capture_output=True, cwd=REPO)
    result = run_adrun("--spec", str(spec_file(workers=2, ps=1)), "--strategy", strategy, *script)
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    plain = np.load(tmp_path / "plain.npz")
    assert float(plain["step"]) == STEPS
    assert all(not np.allclose(plain[key], plain[f"init/{key}"]) for key in plain.files
               if not key.startswith("init/") and key != "step")  # training moved every variable
    for worker in range(2):
        got = np.load(tmp_path / f"w{worker}.npz")
        assert sorted(got.files) == sorted(plain.files)
        for key in plain.files:
            np.testing.assert_allclose(got[key], plain[key], rtol=1e-5, atol=1e-6,
                                       err_msg=f"w{worker}: {key} ({strategy}, {' '.join(traits)})")


@pytest.mark.parametrize("strategy,traits", COMBINED, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_real_program_patterns_equal_the_plain_run(tmp_path, spec_file, strategy, traits):
    assert_equals_plain_run(tmp_path, spec_file, strategy, traits)


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["PS", "PSLoadBalancing", "AllReduce", "Parallax"])
@pytest.mark.parametrize("traits", SINGLE, ids=" ".join)
def test_each_pattern_alone(tmp_path, spec_file, strategy, traits):
    assert_equals_plain_run(tmp_path, spec_file, strategy, traits)
