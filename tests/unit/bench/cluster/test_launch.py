"""Where the cluster benchmark writes each configuration's plan (bench/cluster/launch.py plan_file)."""

from __future__ import annotations

from pathlib import Path

from bench.cluster.launch import plan_file
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
