"""A `JobConfig` for tests that supervise hand-made launches (plain `python -c` tasks): the
supervisor reads the job id and the options given here; spec, script and strategy file are
placeholders it never reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adrun.launch.job.config import JobConfig
from adrun.spec import ClusterSpec


def job_config(job_id: str, **options: Any) -> JobConfig:
    spec = ClusterSpec.model_validate({"version": 1, "nodes": [{"address": "localhost"}]})
    return JobConfig(job_id=job_id, spec=spec, script=Path("unused.py"), script_args=[],
                     strategy_file=Path("unused.yml"), **options)
