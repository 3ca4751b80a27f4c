"""Where the cluster benchmark writes each configuration's plan (bench/cluster/launch.py plan_file), and what
it keeps of the workers' result files."""

from __future__ import annotations

import json
from pathlib import Path

from bench.cluster.launch import _read_results, plan_file
from bench.cluster.results import RunConfig


def cfg(system: str, profile: str = "commodity", **options: str) -> RunConfig:
    return RunConfig(workload="sparse_keras", profile=profile, hosts=2, kind="adrun", system=system,
                     options=tuple(options.items()))


def test_auto_with_options_has_a_plan_file_of_its_own() -> None:
    scratch = Path("/scratch")
    assert plan_file(scratch, cfg("Auto")) == scratch / "plans" / "sparse_keras-2-commodity-Auto.yml"
    assert plan_file(scratch, cfg("Auto", allow_lossy="true")) == (
        scratch / "plans" / "sparse_keras-2-commodity-Auto-allow_lossy=true.yml")
    assert plan_file(scratch, cfg("Auto", profile="datacenter")) != plan_file(scratch, cfg("Auto"))


def test_a_built_in_plan_is_one_file_for_every_link() -> None:
    scratch = Path("/scratch")
    assert plan_file(scratch, cfg("AllReduce", compressor="fp16")) == (
        scratch / "plans" / "sparse_keras-2-AllReduce-compressor=fp16.yml")
    assert plan_file(scratch, cfg("AllReduce", profile="datacenter")) == plan_file(scratch, cfg("AllReduce"))


def test_result_files_keep_the_workers_cpu_time(tmp_path: Path) -> None:
    """Each worker's CPU seconds over its timed steps are kept (per-step CPU of two modes is compared
    from them); a result file written before the field existed reads as None; a missing file is named."""
    base = {"workload": "sparse_keras", "steps": 470, "seconds": 11.75, "batch_size": 128,
            "examples_per_s": 5120.0, "steps_per_s": 40.0}
    (tmp_path / "w0.json").write_text(json.dumps({**base, "worker": 0, "cpu_seconds": 6.25}))
    (tmp_path / "w1.json").write_text(json.dumps({**base, "worker": 1}))
    workers, missing = _read_results(tmp_path, 3)
    assert [w.cpu_seconds for w in workers] == [6.25, None]
    assert missing == [2]
