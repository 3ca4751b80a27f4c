"""Where the cluster benchmark writes each configuration's plan (bench/cluster/launch.py plan_file), and what
it keeps of the workers' result files."""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from bench.cluster.launch import Launcher, _read_results, plan_file
from bench.cluster.results import PEER_TF_MWMS, RunConfig
from tests.support.children import gone


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


@dataclass
class FakeHost:
    """A namespace host whose every command runs `code` instead (the peer's argv after it)."""

    address: str
    code: str

    def exec_argv(self, *argv: str) -> list[str]:
        return [sys.executable, "-c", self.code, *argv]


# writes its pid to argv[1] (renamed into place) and sleeps; the other waits for that file and fails
SLEEPER = ("import os, sys, time; p = sys.argv[1]; open(p + '.tmp', 'w').write(str(os.getpid())); os.rename(p + '.tmp', p); "
           "print('asleep', flush=True); time.sleep(600)")
FAILER = ("import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"
          "print('boom', file=sys.stderr); sys.exit(3)")


def _peer_run(tmp_path: Path, codes: list[str], timeout_s: float) -> tuple[int, str, Path]:
    pid_file = tmp_path / "sleeper.pid"
    hosts = [FakeHost(f"10.0.0.{i + 1}", code) for i, code in enumerate(codes)]
    launcher = Launcher(cluster=SimpleNamespace(hosts=hosts), repo=tmp_path, scratch=tmp_path, workloads=tmp_path,
                        timeout_s=timeout_s, python=str(pid_file))  # the fake peers read the pid file's path as argv[1]
    config = RunConfig(workload="sparse", profile="commodity", hosts=len(hosts), kind="peer", system=PEER_TF_MWMS)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code, log = launcher._run_peer(config, 10, 2, run_dir)
    return code, log, pid_file


def test_a_peer_worker_that_fails_ends_the_run_with_its_code_and_the_others_stopped(tmp_path: Path) -> None:
    code, log, pid_file = _peer_run(tmp_path, [FAILER, SLEEPER], timeout_s=600)
    assert code == 3
    assert log.startswith("--- w0\nboom\n") and "--- w1\nasleep\n" in log
    assert gone(int(pid_file.read_text()))


def test_a_peer_run_past_its_deadline_is_stopped_with_the_stop_signals_code(tmp_path: Path) -> None:
    code, log, pid_file = _peer_run(tmp_path, [SLEEPER], timeout_s=0)
    assert code == -signal.SIGTERM
    if pid_file.exists():  # it may be stopped before it wrote its pid
        assert gone(int(pid_file.read_text()))
