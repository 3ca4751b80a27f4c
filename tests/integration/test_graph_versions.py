"""Graph mode's version pinning in real jobs (adrun/runtime/versions.py `GRAPH`): a graph-mode script
on an untested TensorFlow is refused before any job starts, by capture (a named builder) or by
Auto's profiling start, with one message naming what was found and tested; the setting runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import run_adrun, write_spec
from tests.support.paths import TINY
from tests.support.untested_versions import UNTESTED_TF, untested_tensorflow_env


@pytest.mark.parametrize("builder", [(), ("--strategy", "AllReduce")], ids=["Auto", "AllReduce"])
def test_an_untested_tensorflow_is_refused_before_the_job(tmp_path: Path, builder: tuple[str, ...]) -> None:
    spec = write_spec(tmp_path / "cluster.yml", 2, 0)
    refused = run_adrun("--spec", str(spec), "--quiet", *builder, TINY,
                        env=untested_tensorflow_env(tmp_path))
    assert refused.returncode == 2, refused.output
    assert "Traceback" not in refused.output
    [line] = [line for line in refused.stderr.splitlines() if line.startswith("adrun: error: ")]
    assert (f"graph mode was tested with tensorflow 2.21.x, tf_keras 2.21.x, and found tensorflow {UNTESTED_TF}. "
            "It patches private TensorFlow/Keras code") in line, line
    assert "set ADRUN_ALLOW_UNTESTED_VERSIONS=1 to try anyway" in line, line
    assert leftover_processes(refused.job_id) == []


@pytest.mark.full  # a whole 2-worker job more
def test_an_untested_tensorflow_runs_when_allowed(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "cluster.yml", 2, 0)
    allowed = run_adrun("--spec", str(spec), "--strategy", "AllReduce", TINY,
                        env={**untested_tensorflow_env(tmp_path), "ADRUN_ALLOW_UNTESTED_VERSIONS": "1"})
    assert allowed.returncode == 0, allowed.output
    assert f"adrun: graph mode on untested tensorflow {UNTESTED_TF} (ADRUN_ALLOW_UNTESTED_VERSIONS=1)" in allowed.output
    assert leftover_processes(allowed.job_id) == []
