"""What one benchmark invocation measured, as typed data written to JSON before anything is summarized.

The markdown and the plots are generated from this JSON (bench/cluster/report.py), never from
terminal output, so a report can be regenerated, and checked, from the file alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

PEER_TF_PS = "tf_ps"
PEER_TF_MWMS = "tf_mwms"
# a Python exception's line (`ValueError: ...`, `tensorflow.errors.X: ...`): the cause in a run's log
# (`.match` for a line that is one, `.search` for one after a prefix such as RunResult.error's `exit 1: `)
EXCEPTION_LINE = re.compile(r"\b(?:[\w.]+\.)?\w+(?:Error|Exception): ")
# a 1-minute load average at the start above this beside the scheduler's autogroups: other sessions' work was
# running as the benchmark began and, whatever its nice, may have taken CPU shares from it (bench.cluster.run's machine facts)
AUTOGROUP_LOAD = 1.0


class RunConfig(BaseModel):
    """One configuration of the matrix: what ran, on which network, with how many hosts."""

    model_config = ConfigDict(frozen=True)

    workload: str
    profile: str
    hosts: int
    kind: Literal["adrun", "peer"]
    system: str  # an adrun builder name or a peer name
    options: tuple[tuple[str, str], ...] = ()  # builder options, as typed after --strategy-opt
    runtime: str = ""  # another checkout's adrun ran it (run.py --runtime LABEL=CHECKOUT); "": this one's

    @property
    def label(self) -> str:
        """`AllReduce (compressor=fp16)`, `tf_ps`, `PartitionedPS @main`: the system as the tables
        and plots name it."""
        opts = ", ".join(f"{k}={v}" for k, v in self.options)
        name = f"{self.system} ({opts})" if opts else self.system
        return f"{name} @{self.runtime}" if self.runtime else name

    @property
    def planned(self) -> RunConfig:
        """The configuration whose plan document this one runs: itself run by this checkout's adrun
        (a --runtime twin runs the same plan, so that only the runtime differs)."""
        return self.model_copy(update={"runtime": ""})


class WorkerResult(BaseModel):
    """A worker's result file (the contract of bench/workloads): its own timed steps after warm-up."""

    workload: str
    worker: int
    steps: int
    seconds: float
    batch_size: int
    examples_per_s: float
    steps_per_s: float
    cpu_seconds: float | None = None  # the process's CPU time over the timed steps, all threads (older files lack it)


class HostBytes(BaseModel):
    """Bytes a host's interface sent and received during one run (counter differences)."""

    host: int  # 1-based, as the namespace hosts are numbered
    sent: int
    received: int


class RunResult(BaseModel):
    """One repetition of one configuration."""

    config: RunConfig
    repetition: int
    steps: int  # --steps given to the workload (warm-up included)
    warmup: int
    exit_code: int
    error: str | None = None  # why the run does not count (exit code, missing result files), with a log tail
    workers: list[WorkerResult] = []
    bytes: list[HostBytes] = []
    wall_s: float
    load_average: float | None = None  # the machine's 1-minute load average as the run ended (shared machine)

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0 and len(self.workers) == self.config.hosts

    @property
    def examples_per_s(self) -> float | None:
        """The cluster's throughput: every worker's examples per second, summed (each worker times
        only its own steps after warm-up, so start-up and warm-up are excluded)."""
        return sum(w.examples_per_s for w in self.workers) if self.ok else None


class LowerBound(BaseModel):
    """Bytes per step each host must send under an adrun plan, by the strategy family's lower bound."""

    workload: str
    hosts: int
    system: str  # RunConfig.label of the adrun configuration
    profile: str = ""  # the link profile the plan was made for; "" for a plan made for every profile
    sent_per_host: list[float]  # host 1 first
    method: str  # which bound (bench/cluster/lower_bound.py)


class HookOverhead(BaseModel):
    """The hook's single-process overhead, from bench/hook_overhead.py, or why it is missing."""

    plain_examples_per_s: float | None = None
    adrun_examples_per_s: float | None = None
    ratio: float | None = None  # adrun / plain
    cpu_ratio: float | None = None  # CPU time per step, adrun / plain (steadier than wall time on a shared machine)
    source: str  # the command that measured it, or why there is no figure
    wall_s: float | None = None  # how long the measurement took (the next run's time estimate uses it)


class Profile(BaseModel):
    """A link profile: every host's veth shaped to `rate_mbit` in both directions."""

    name: str
    rate_mbit: float
    delay_ms: float = 0.0


class BenchResults(BaseModel):
    """Everything one `python -m bench.cluster.run` measured."""

    version: Literal[1] = 1
    started: str
    finished: str | None = None
    command: str
    machine: dict[str, str]
    versions: dict[str, str]
    profiles: list[Profile]
    notes: list[str] = []
    runs: list[RunResult] = []
    lower_bounds: list[LowerBound] = []
    hook_overhead: HookOverhead | None = None

    def loads(self) -> list[float]:
        """The 1-minute load averages recorded: the machine's at the start and the end, and after each run."""
        ends = [float(v.split()[0]) for k, v in self.machine.items() if k.startswith("load average")]
        return ends + [r.load_average for r in self.runs if r.load_average is not None]

    @computed_field  # written to the JSON, so a reader of the results sees it without the report
    @property
    def autogroup_warning(self) -> str | None:
        """Why the figures may be low, when the scheduler's autogroups were on and the load average
        at the start, taken before any run, was above AUTOGROUP_LOAD: `nice` ranks threads only
        within one session's group, so each other session running work took about an equal CPU share
        from the benchmark. The loads after the runs count the benchmark's own processes, so they
        cannot say whether other work ran. None otherwise (autogroups off, or not recorded: results
        from before the fact was)."""
        start = self.machine.get("load average at start")
        load = float(start.split()[0]) if start else 0.0
        if self.machine.get("scheduler autogroups") != "on" or load <= AUTOGROUP_LOAD:
            return None
        return ("may have been exposed to other sessions' work: the scheduler's autogroups were on and the 1-minute "
                f"load average was {load:.1f} at the start, before any run. With autogroups on, `nice` ranks threads only "
                "within one session, so another session's work, niced or not, takes about an equal share of the CPUs from "
                "the benchmark: its figures may be low by that share. Turn autogroups off before measuring: "
                "`sysctl -w kernel.sched_autogroup_enabled=0` (bench/README.md, \"How it measures\", Load).")


def save_results(results: BenchResults, path: Path) -> None:
    """Write atomically, so an interrupted benchmark leaves the last complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(results.model_dump_json(indent=1))
    tmp.replace(path)


def load_results(path: Path) -> BenchResults:
    return BenchResults.model_validate_json(path.read_text())
