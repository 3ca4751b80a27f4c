"""The facts the cost model works from, and what it predicts: typed, JSON-serialisable, TF-free.

- `ModelProfile`: the captured graph plus what a short profiling run measured (compute time per
  step, distinct rows each sparse variable touches per step).
- `NetworkFacts`: bandwidth and latency between the cluster's hosts and inside one host, measured
  or given in the cluster spec.
- `Prediction`: the cost model's estimate of one strategy on one cluster.
- `TrialRecord`: a finished run as the records database keeps it, the data the fit learns from.

The profiling run, the network measurement, the records database, the cost model, its fit, Auto
and `adrun profile` exchange these objects and nothing looser.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from adrun.graph_item import GraphItem
from adrun.spec import ClusterSpec

from .document import Strategy

# "assumed": neither measured nor given; e.g. a pair of nodes that a cluster of more than 4 nodes does
# not measure, which gets measured pairs' figures by launch/nodes/pair_inference.py's rule
FactSource = Literal["measured", "spec", "assumed"]


class RowsTouched(BaseModel):
    """Distinct rows of one sparse-gradient variable a worker's step touches, over the profiled steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: float = Field(ge=0)
    max: int = Field(ge=0)
    # Where the rows lie: the mean distinct rows per step in each of len(by_range) slices of axis 0,
    # lowest ids first, cut as `document.shard_sizes(rows, len(by_range))` cuts shards. Vocabularies
    # sorted by frequency put most touched rows in the first shard, which then bounds a partitioned
    # PS. Empty: not measured; the cost model spreads `mean` over shards by their rows.
    by_range: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = []


class ModelProfile(BaseModel):
    """The model as the cost model sees it: static graph facts and one process's measured step."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    graph: GraphItem
    # seconds of one training step on one process at the script's batch size, warm-up excluded;
    # 0 with steps_measured 0 when the script ran no step beyond the warm-up (`untimed`)
    compute_s: float = Field(ge=0, allow_inf_nan=False)
    steps_measured: int = Field(ge=0)
    # by variable name (as in the GraphItem), for every variable with sparse gradients
    rows_touched: dict[str, RowsTouched] = {}

    @property
    def batch_size(self) -> int | None:
        return self.graph.batch_size

    @property
    def untimed(self) -> bool:
        """No step was timed: a plan from this profile rests on the model's facts and the network
        alone (communication; compute counts as 0)."""
        return self.steps_measured == 0

    @classmethod
    def of_facts(cls, graph: GraphItem) -> ModelProfile:
        """The profile of a script that ran too few steps to time one: its graph only."""
        return cls(graph=graph, compute_s=0.0, steps_measured=0)


class Link(BaseModel):
    """One direction of a path between two hosts (or inside one host)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bytes_per_s: float = Field(gt=0, allow_inf_nan=False)
    latency_s: float = Field(ge=0, allow_inf_nan=False)  # one way, for a small message
    source: FactSource
    # bytes a token-bucket-shaped path passes at once after an idle moment (tc tbf's `burst`, a
    # virtual machine's burst allowance) before it falls to `bytes_per_s`; 0: not shaped, or unknown
    burst_bytes: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    # bytes the sender's queue on the path holds before it drops (tc tbf's `limit`: rate x latency
    # + burst); 0: unknown. A message that fits is sent whole before the next flow's: see
    # cost_model.Paths.served_in_turn
    queue_bytes: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class HostLink(Link):
    src: str  # node address as in the spec
    dst: str


class NetworkFacts(BaseModel):
    """Bandwidth and latency of the cluster's paths: inside a host (`local`, loopback) and between
    hosts (`links`, one entry per ordered pair: measured, given, or assumed from measured ones)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    local: Link
    links: list[HostLink] = []
    # The hosts are network namespaces (or virtual machines) of one machine with this many CPUs, as
    # on the benchmark cluster (bench/cluster/): their compute, their tasks' RPC work and the
    # software switch between them share those CPUs. None: every host is its own machine.
    shared_cpus: int | None = Field(default=None, ge=1)

    def link(self, src: str, dst: str) -> Link:
        """The path from host `src` to host `dst`: `local` for one host; the given direction, else
        the reverse one. KeyError when neither was measured or given."""
        if src == dst:
            return self.local
        by_pair = {(link.src, link.dst): link for link in self.links}
        found = by_pair.get((src, dst)) or by_pair.get((dst, src))
        if found is None:
            raise KeyError(f"no network facts between {src} and {dst}")
        return found


class NodeBytes(BaseModel):
    """Bytes one node sends to and receives from other nodes in one step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sent: float = Field(ge=0)
    received: float = Field(ge=0)


class Prediction(BaseModel):
    """The cost model's estimate for one strategy on one cluster."""

    model_config = ConfigDict(extra="forbid")

    builder: str  # the strategy's builder, e.g. "PSLoadBalancing" or "Auto"
    step_s: float = Field(gt=0)  # predicted seconds per synchronous step (every worker steps once)
    compute_s: float = Field(ge=0)  # of which computation, at the per-replica batch
    examples_per_s: float | None = None  # the cluster's, when the batch size is known
    node_bytes: dict[str, NodeBytes]  # per node address
    busiest_link: str  # e.g. "10.0.0.1 -> 10.0.0.2", or "none" when nothing crosses hosts
    busiest_link_bytes: float = Field(ge=0)
    bound: str  # what bounds the step: "compute", "ps:0 link", "all-reduce ring", ...
    # predicted share of the step's synchronization time per planned variable (sums to <= 1)
    variable_share: dict[str, float] = {}


class TrialRecord(BaseModel):
    """One finished run, as recorded for the fit."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    recorded_at: str  # ISO 8601
    cluster_key: str  # the same for runs on the same hosts with the same task counts
    workload: str  # the script's name and arguments, to group runs of one model
    spec: ClusterSpec
    strategy: Strategy
    profile: ModelProfile | None = None  # None: no profiling run of this graph was recorded
    network: NetworkFacts | None = None
    steps_per_s: float = Field(gt=0)  # the cluster's synchronous steps per second (per worker)
    examples_per_s: float | None = None
    node_bytes: dict[str, NodeBytes] = {}  # measured per step, when the run counted them

    @model_validator(mode="after")
    def _profile_of_this_graph(self) -> TrialRecord:
        if self.profile is not None and self.profile.graph.fingerprint != self.strategy.fingerprint:
            raise ValueError("the profile and the strategy are of different graphs (fingerprints differ)")
        return self
