"""What `adrun profile` found, as one typed document: the model, the cluster, every strategy's
prediction (and, with trials, its measurement), the fit behind the predictions, and the plan
recommended. `--json` prints this object; the terminal report (`adrun.profile.view`) renders it.

The sections are built here from the typed facts (`adrun.strategies.facts`), so the JSON and the
terminal show the same numbers. No TensorFlow, no launching: pure data.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.stats import kendalltau

from adrun.graph_item import GradKind, ScriptKind, dtype_itemsize
from adrun.spec import ClusterSpec
from adrun.strategies.document import Strategy
from adrun.strategies.facts import FactSource, Link, ModelProfile, NetworkFacts, Prediction


class VariableRow(BaseModel):
    """One trainable variable with gradients, as the model table shows it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[int]
    mb: float  # the whole variable
    grad: GradKind
    rows_touched_mean: float | None = None  # sparse: distinct rows one worker's step touches
    rows_touched_max: int | None = None
    step_mb: float  # gradient one worker's step produces: the whole variable, or the rows touched
    step_share: float = Field(ge=0, le=1)  # of all variables' step_mb
    # its lookups pool over their bags when on PS tasks (VariableInfo.pooled): the per-example sums
    # [examples, dim] each shard returns, and d_sum each PS task takes, instead of the
    # rows; None when they do not (or the batch is unknown)
    pooled_mb: float | None = None


class ModelSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    script: str
    script_args: list[str]
    kind: ScriptKind = "graph"  # the script's runtime: a tf.compat.v1 Session's graph, or TF2 (added within version 1)
    fingerprint: str
    optimizer: str | None
    batch_size: int | None  # examples per step per worker, when capture could read it
    compute_s: float  # one step on one process, warm-up excluded
    steps_measured: int
    variables: list[VariableRow]  # by step_mb, largest first
    total_mb: float
    step_mb: float


class LinkRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    src: str
    dst: str  # equal to src for the path inside one host (loopback)
    mbit_s: float
    latency_ms: float
    source: FactSource


class NodeRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str
    chief: bool
    workers: int
    ps: int


class ClusterSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: list[NodeRow]
    num_workers: int
    num_ps: int
    links: list[LinkRow]  # the path inside a host first, then between hosts


class FitSection(BaseModel):
    """How the cost model's coefficients were obtained: from `records_used` earlier runs on this
    cluster (0: the analytical values alone; runs recorded without a profile cannot be used), with
    the mean relative error of the predicted step time on those records before and after fitting."""

    model_config = ConfigDict(extra="forbid")

    records_used: int = Field(ge=0)
    records_skipped: int = Field(default=0, ge=0)  # recorded without a profile or network facts
    error_before: float | None = None
    error_after: float | None = None


class TrialResult(BaseModel):
    """One strategy run for a bounded number of steps on the real cluster."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    succeeded: bool
    steps: int  # summed over the workers
    elapsed_s: float | None = None  # the trial job's wall time, start-up included (None: it never started)
    step_s: float | None = None  # measured seconds per synchronous step
    examples_per_s: float | None = None  # the cluster's
    root_cause: str | None = None  # why it failed: the failing task's one-line summary
    root_cause_stderr: list[str] = []


class Candidate(BaseModel):
    """A strategy the report compares: a built-in builder's plan or Auto's."""

    model_config = ConfigDict(extra="forbid")

    builder: str
    prediction: Prediction
    trial: TrialResult | None = None  # None: not tried
    # an earlier (faster predicted) candidate whose plan synchronizes every variable the same way,
    # e.g. Auto keeping AllReduce's plan: not tried again, and not counted twice in the agreement
    same_plan_as: str | None = None

    @property
    def measured_step_s(self) -> float | None:
        trial = self.trial
        return trial.step_s if trial is not None and trial.succeeded else None


class TrialsSection(BaseModel):
    """How well the predictions matched the trials that succeeded."""

    model_config = ConfigDict(extra="forbid")

    steps: int  # each trial's bound, per worker
    tried: int
    succeeded: int
    kendall_tau: float | None = None  # predicted vs measured step time; None below two trials
    mean_relative_error: float | None = None  # of the predicted step time, over the trials


# Published scaling figures of other systems to read the curves against (their hardware is not
# this cluster's: GPUs and 25-100 Gbit/s links); the sources and their confidence are in the
# repository's reference notes on communication costs (docs/profiling.md cites them).
ANCHORS = (
    "Horovod: 90 % scaling efficiency at 512 GPUs for Inception V3 and ResNet-101, 68 % for VGG-16 (25 Gbit/s RoCE)",
    "Horovod paper: 88 % at 128 GPUs against about 50 % for TensorFlow's parameter servers (25 GbE)",
    "AutoDist, BERT-large on 8 nodes (32 GPUs, 50 Gbit/s): PartitionedPS about 45 % efficiency, AllReduce about 27 %",
    "Parallax, LM1B from 1 to 8 machines: the hybrid (sparse on PS, dense all-reduced) 3.1x for 8x the hardware",
)


class ScalingPoint(BaseModel):
    """One builder's prediction on a cluster of `hosts` hosts."""

    model_config = ConfigDict(extra="forbid")

    hosts: int = Field(ge=1)
    step_s: float = Field(gt=0)
    examples_per_s: float | None = None  # the cluster's; None when the batch size is unknown
    # examples/s over N times one host's compute-bound rate (its workers stepping with no sync)
    efficiency: float | None = None
    bound: str  # what bounds the step, as in a Prediction
    # bytes the busiest host sends a step, in MB, as predicted (lookups pooled on the PS counted by
    # their sums, ids and d_sum, not rows: strategies/wire_bound.py); None in reports made before
    sent_mb_per_host: float | None = Field(default=None, ge=0)


class ScalingCurve(BaseModel):
    model_config = ConfigDict(extra="forbid")

    builder: str
    points: list[ScalingPoint]  # by host count; a count the builder cannot plan is left out


class ScalingSection(BaseModel):
    """The predicted curves, and what they assume: the host shape repeated and the one path
    between hosts every pair gets."""

    model_config = ConfigDict(extra="forbid")

    host_counts: list[int]
    workers_per_host: list[int]  # the sample cluster's nodes, repeated in this order
    ps_per_host: list[int]
    link_mbit_s: float
    link_latency_ms: float
    link_source: str  # measured / spec / assumed, and which path was taken
    curves: list[ScalingCurve]  # every builder that planned at least one host count, Auto last
    auto_builders: dict[int, str] = {}  # host count -> the built-in plan Auto's equals, if it does
    anchors: list[str] = list(ANCHORS)


class ProfileReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    model: ModelSection
    cluster: ClusterSection
    fit: FitSection
    candidates: list[Candidate]  # by predicted step time, fastest first
    # built-in builders that cannot plan this graph on this cluster (e.g. PS builders without a PS), and why
    unavailable: dict[str, str] = {}
    trials: TrialsSection | None = None
    scaling: ScalingSection | None = None  # --hosts: predictions for more hosts of this kind
    recommended: str  # a candidate's builder
    recommended_by: Literal["prediction", "trials"]
    recommended_plan: Strategy
    elapsed_s: float  # the whole profile, trials included


def model_section(profile: ModelProfile, script: str, script_args: list[str]) -> ModelSection:
    """The model table: every variable the strategies plan, sized by the gradient one worker's
    step produces (a sparse variable's distinct rows touched, else the whole variable), which is
    what synchronization has to move."""
    mb = 1e6
    rows = []
    for var in profile.graph.trainable_with_grads():
        touched = profile.rows_touched.get(var.name) if var.grad == "sparse" else None
        step_bytes: float = var.nbytes
        if touched is not None and var.shape and var.shape[0] > 0:
            row_bytes = var.nbytes / var.shape[0]
            step_bytes = min(var.nbytes, touched.mean * row_bytes)
        one_row = dtype_itemsize(var.dtype) * math.prod(max(d, 1) for d in var.shape[1:])
        sums = var.pooled.sums_bytes(one_row) if var.pooled is not None else None
        rows.append(VariableRow(
            name=var.name, shape=list(var.shape), mb=var.nbytes / mb, grad=var.grad or "dense",
            rows_touched_mean=touched.mean if touched else None, rows_touched_max=touched.max if touched else None,
            step_mb=step_bytes / mb, step_share=0.0,
            pooled_mb=sums / mb if sums is not None else None,
        ))
    step_total = sum(r.step_mb for r in rows)
    for row in rows:
        row.step_share = row.step_mb / step_total if step_total > 0 else 0.0
    rows.sort(key=lambda r: r.step_mb, reverse=True)
    return ModelSection(
        script=script, script_args=script_args, kind=profile.graph.kind, fingerprint=profile.graph.fingerprint,
        optimizer=profile.graph.optimizer, batch_size=profile.batch_size, compute_s=profile.compute_s,
        steps_measured=profile.steps_measured, variables=rows, total_mb=sum(r.mb for r in rows),
        step_mb=step_total,
    )


def cluster_section(spec: ClusterSpec, network: NetworkFacts) -> ClusterSection:
    def row(src: str, dst: str, link: Link) -> LinkRow:
        return LinkRow(src=src, dst=dst, mbit_s=link.bytes_per_s * 8 / 1e6, latency_ms=link.latency_s * 1e3,
                       source=link.source)

    local_name = spec.nodes[0].address if len(spec.nodes) == 1 else "each host"
    return ClusterSection(
        nodes=[NodeRow(address=n.address, chief=n is spec.chief, workers=n.workers, ps=n.ps) for n in spec.nodes],
        num_workers=spec.num_workers, num_ps=spec.num_ps,
        links=[row(local_name, local_name, network.local), *(row(link.src, link.dst, link) for link in network.links)],
    )


def trials_section(candidates: list[Candidate], steps: int) -> TrialsSection:
    """Rank agreement (Kendall τ) and mean relative error of the predicted step time over the
    candidates whose trial succeeded."""
    tried = [c for c in candidates if c.trial is not None and c.same_plan_as is None]
    measured = [(c.prediction.step_s, s) for c in tried if (s := c.measured_step_s) is not None]  # (predicted, measured)
    tau = None
    if len(measured) >= 2:
        value = kendalltau([p for p, _ in measured], [m for _, m in measured]).statistic
        tau = None if math.isnan(value) else float(value)
    error = None
    if measured:
        error = float(np.mean([abs(p - m) / m for p, m in measured]))
    return TrialsSection(steps=steps, tried=len(tried), succeeded=len(measured), kendall_tau=tau,
                         mean_relative_error=error)


def same_plan(a: Strategy, b: Strategy) -> bool:
    """Whether two plans synchronize every variable the same way on the same devices (builders'
    notes and options aside)."""
    def essentials(plan: Strategy) -> tuple:
        return ([v.model_dump(exclude={"note"}) for v in plan.variables], plan.replica_devices, plan.num_ps)

    return essentials(a) == essentials(b)


def recommend(candidates: list[Candidate]) -> tuple[Candidate, Literal["prediction", "trials"]]:
    """The measured fastest when a trial succeeded, else the predicted fastest (the first)."""
    measured = [(s, c) for c in candidates if (s := c.measured_step_s) is not None]
    if measured:
        return min(measured, key=lambda m: m[0])[1], "trials"
    return candidates[0], "prediction"
