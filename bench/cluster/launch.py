"""Running one configuration once: an adrun job over SSH, or a peer's processes in the namespaces.

Every run reads the hosts' byte counters just before it starts and just after it ends, and reads
the workers' result files (the workloads' contract: each worker times its own steps after
warm-up). Nothing a run starts outlives it: adrun tears its job down itself (and is interrupted
then killed on a timeout); peer processes run in their own sessions and are ended here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from adrun.capture_run import capture_graph
from adrun.errors import UserError
from adrun.graph_item import GraphItem
from adrun.spec import load_spec
from adrun.strategies import build_strategy
from adrun.strategies.document import dump_strategy
from tests.cluster.netns import NetnsCluster

from ..children import Children, Role
from ..paths import PEERS_DIR
from .network import read_counters, write_adrun_spec
from .results import EXCEPTION_LINE, PEER_TF_MWMS, PEER_TF_PS, HostBytes, RunConfig, RunResult, WorkerResult
from .tf2 import TF2_PEERS, script_args

AUTO = "Auto"  # the builder whose plan is chosen per link by the cost model
PS_PORT = 2222
WORKER_PORT = 2223
STOP_GRACE_S = 10.0
LOG_TAIL = 1500


@dataclass
class Launcher:
    """Where and how runs start: the hosts, the repository, a scratch directory, the limits."""

    cluster: NetnsCluster
    repo: Path
    scratch: Path
    workloads: Path  # directory of the workload scripts (bench/workloads)
    extra_args: tuple[str, ...] = ()  # appended to every workload's arguments (e.g. tiny sizes)
    timeout_s: float = 1800.0
    python: str = sys.executable
    runs_started: int = field(default=0, init=False)
    captured: dict[tuple[str, int], GraphItem] = field(default_factory=dict, init=False)
    plan_files: dict[str, Path] = field(default_factory=dict)  # given strategy documents, by system label
    runtimes: dict[str, Path] = field(default_factory=dict)  # other checkouts (with a .venv), by --runtime label

    def workload_args(self, workload: str, steps: int, warmup: int, result_dir: Path) -> list[str]:
        """The workload's script and its flags, as run under adrun."""
        script, *choice = script_args(workload)
        return [str(self.workloads / script), *choice, *self.run_args(steps, warmup, result_dir)]

    def run_args(self, steps: int, warmup: int, result_dir: Path) -> list[str]:
        """The flags every workload script and peer takes: steps, warm-up, result files, extras."""
        return ["--steps", str(steps), "--warmup", str(warmup), "--result-file", str(result_dir / "w{worker}.json"),
                *self.extra_args]

    def spec(self, hosts: int) -> Path:
        return write_adrun_spec(self.cluster, hosts, self.scratch / f"cluster-{hosts}.yml")

    @staticmethod
    def plan_sees_link(config: RunConfig) -> bool:
        """Whether the configuration's plan depends on the link: Auto's is chosen by the cost model
        from the network it measures, so it is made on each profile's shaped link."""
        return config.system == AUTO

    def build_plan(self, config: RunConfig) -> Path:
        """The strategy document of an adrun configuration (the runs use it, and the lower bound is
        computed from it). The graph is captured once per (workload, host count) and planned by
        every builder, as `adrun strategy build` would; Auto's plan is made by `adrun strategy build
        Auto` itself, as a user would (profiling the workload and measuring the shaped link, fitted
        on no records: the analytical model). UserError when capture or planning fails."""
        if config.system in self.plan_files:
            return self.plan_files[config.system]
        if config.system == AUTO:
            return self._build_auto_plan(config)
        plan = plan_file(self.scratch, config)
        plan.parent.mkdir(parents=True, exist_ok=True)
        dump_strategy(build_strategy(config.system, self.graph(config.workload, config.hosts),
                                     load_spec(self.spec(config.hosts)), dict(config.options)), plan)
        return plan

    def graph(self, workload: str, hosts: int) -> GraphItem:
        """The workload's graph as adrun captures it on `hosts` hosts, captured once: the built-in
        builders plan from it, and the lower bound reads its pooled lookups (VariableInfo.pooled)."""
        key = (workload, hosts)
        if key not in self.captured:
            script, *args = self.workload_args(workload, 2, 1, self.scratch / "capture")
            self.captured[key] = capture_graph(Path(script), args, hosts, f"bench-capture-{workload}")
        return self.captured[key]

    def _build_auto_plan(self, config: RunConfig) -> Path:
        plan = plan_file(self.scratch, config)
        plan.parent.mkdir(parents=True, exist_ok=True)
        argv = [self.python, "-m", "adrun", "strategy", "build", "Auto", "--spec", str(self.spec(config.hosts)),
                "--no-record", *(f"--strategy-opt={k}={v}" for k, v in config.options), "-o", str(plan),
                *self.workload_args(config.workload, 1000, 1, self.scratch / "capture")]
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=self.repo,
                              env=_env(self.scratch), timeout=self.timeout_s)
        if done.returncode != 0:
            raise UserError(f"adrun strategy build Auto exited {done.returncode}: {digest(done.stderr)}")
        return plan

    def run(self, config: RunConfig, repetition: int, steps: int, warmup: int, plan: Path | None) -> RunResult:
        self.runs_started += 1
        run_dir = self.scratch / "runs" / f"{self.runs_started:04d}-{config.workload}-{config.hosts}-{config.system}"
        result_dir = run_dir / "results"
        result_dir.mkdir(parents=True)
        hosts = self.cluster.hosts[:config.hosts]
        before = [read_counters(h) for h in hosts]
        started = time.monotonic()
        if config.kind == "adrun":
            assert plan is not None
            exit_code, log = self._run_adrun(config, steps, warmup, plan, run_dir)
        else:
            exit_code, log = self._run_peer(config, steps, warmup, run_dir)
        wall = time.monotonic() - started
        after = [read_counters(h) for h in hosts]
        workers, missing = _read_results(result_dir, config.hosts)
        error = None
        if exit_code != 0 or missing:
            what = f"exit {exit_code}" + (f", no result file from worker(s) {missing}" if missing else "")
            error = f"{what}: {digest(log)}"
        return RunResult(
            config=config, repetition=repetition, steps=steps, warmup=warmup, exit_code=exit_code, error=error,
            workers=workers, wall_s=wall,
            bytes=[HostBytes(host=h.index, sent=a.sent - b.sent, received=a.received - b.received)
                   for h, b, a in zip(hosts, before, after, strict=True)],
        )

    # -- adrun ------------------------------------------------------------------------------------
    def adrun_from(self, config: RunConfig) -> tuple[str, Path]:
        """(interpreter, working directory) that run the configuration's adrun: this checkout's, or
        for a --runtime twin the other checkout's venv, started in that checkout (so `python -m
        adrun` imports its package, and the tasks, which default to the launcher's interpreter and
        directory, run its runtime too)."""
        if not config.runtime:
            return self.python, self.repo
        checkout = self.runtimes[config.runtime]
        return str(checkout / ".venv" / "bin" / "python"), checkout

    def _run_adrun(self, config: RunConfig, steps: int, warmup: int, plan: Path, run_dir: Path) -> tuple[int, str]:
        python, cwd = self.adrun_from(config)
        argv = [python, "-m", "adrun", "--spec", str(self.spec(config.hosts)), "--strategy", str(plan), "--quiet",
                "--log-dir", str(run_dir / "logs"), *self.workload_args(config.workload, steps, warmup, run_dir / "results")]
        log = run_dir / "adrun.log"
        # on the deadline (or any way out) adrun gets SIGINT: its Ctrl-C path tears the whole job down
        with Children(grace_s=STOP_GRACE_S) as children:
            adrun = children.start("adrun", argv, log=log, stop_signal=signal.SIGINT, cwd=cwd, env=_env(self.scratch))
            children.wait(self.timeout_s)
        return adrun.proc.returncode, log.read_text(errors="replace")

    # -- peers ------------------------------------------------------------------------------------
    def _run_peer(self, config: RunConfig, steps: int, warmup: int, run_dir: Path) -> tuple[int, str]:
        hosts = self.cluster.hosts[:config.hosts]
        peer = str(PEERS_DIR / f"{config.system}.py")
        # a peer takes the workload by name instead of its script, then the workload's own flags
        common = ["--workload", config.workload, *self.run_args(steps, warmup, run_dir / "results")]
        workers: list[list[str]] = []
        servers: list[list[str]] = []
        if config.system == PEER_TF_PS:
            cluster_args = ["--ps-hosts", ",".join(f"{h.address}:{PS_PORT}" for h in hosts),
                            "--worker-hosts", ",".join(f"{h.address}:{WORKER_PORT}" for h in hosts)]
            for i, host in enumerate(hosts):
                servers.append(host.exec_argv(self.python, peer, *cluster_args, "--job-name", "ps", "--task-index", str(i), *common))
                workers.append(host.exec_argv(self.python, peer, *cluster_args, "--job-name", "worker", "--task-index", str(i), *common))
        elif config.system in (PEER_TF_MWMS, *TF2_PEERS):  # MultiWorkerMirroredStrategy: workers only
            cluster_args = ["--worker-hosts", ",".join(f"{h.address}:{WORKER_PORT}" for h in hosts)]
            for i, host in enumerate(hosts):
                workers.append(host.exec_argv(self.python, peer, *cluster_args, "--task-index", str(i), *common))
        else:
            raise ValueError(f"unknown peer {config.system!r}")
        # a worker that fails (or a PS task) ends the run: the others would wait for it until the deadline
        with Children(grace_s=STOP_GRACE_S) as children:
            for tag, argv, role in [*((f"ps{i}", argv, Role.BESIDE) for i, argv in enumerate(servers)),
                                    *((f"w{i}", argv, Role.WAITED) for i, argv in enumerate(workers))]:
                children.start(tag, argv, log=run_dir / f"{tag}.log", role=role, cwd=self.repo, env=_env(self.scratch))
            failure = children.wait(self.timeout_s)
        code = 0 if failure is None else failure.child.proc.returncode
        log = "".join(f"--- {c.name}\n" + (run_dir / f"{c.name}.log").read_text(errors="replace")[-LOG_TAIL:]
                      for c in children.children)
        return code, log


def digest(log: str) -> str:
    """adrun's own error lines and Python exception lines first (they name the cause; a peer's may
    be followed by more than the tail keeps), then the log's tail."""
    errors = [line for line in log.splitlines() if line.startswith(("adrun: error", "root cause"))
              or EXCEPTION_LINE.match(line)]
    return "\n".join([*errors[:3], "...", log[-LOG_TAIL:]])


def plan_file(scratch: Path, config: RunConfig) -> Path:
    """Where a configuration's plan is written: one file per workload, host count, system and options
    (Auto and Auto allow_lossy=true of one group each need theirs), and per profile for a plan that
    sees the link (bench/cost_model_check.py reads Auto's as <workload>-<hosts>-<profile>-Auto.yml)."""
    profile = [config.profile] if Launcher.plan_sees_link(config) else []
    name = "-".join([config.workload, str(config.hosts), *profile, config.system, *(f"{k}={v}" for k, v in config.options)])
    return scratch / "plans" / f"{name}.yml"


def _env(scratch: Path) -> dict[str, str]:
    """The runs' environment: adrun's run records and job record go to a home in the scratch
    directory, not into the user's ~/.adrun."""
    return {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1", "ADRUN_HOME": str(scratch / "home")}


def _read_results(result_dir: Path, workers: int) -> tuple[list[WorkerResult], list[int]]:
    """The workers' result files, and the indices of workers that wrote none."""
    found, missing = [], []
    for i in range(workers):
        path = result_dir / f"w{i}.json"
        if path.exists():
            found.append(WorkerResult.model_validate(json.loads(path.read_text())))
        else:
            missing.append(i)
    return found, missing
