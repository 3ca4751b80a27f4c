"""Small synthetic facts (graphs, profiles, clusters, networks) for the cost model, fit and Auto tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adrun.graph_item import GraphItem, PooledBags, VariableInfo
from adrun.placement import replica_devices
from adrun.spec import ClusterSpec, Node
from adrun.strategies.cost_model import Coefficients
from adrun.strategies.document import Strategy, VariablePlan
from adrun.strategies.facts import HostLink, Link, ModelProfile, NetworkFacts, RowsTouched

# no software latency, per-variable or per-PS-task overheads nor reverse traffic: only bytes over
# bandwidth and compute remain
BANDWIDTH_ONLY = Coefficients(message_latency_s=0.0, variable_overhead_s=0.0, ps_variable_overhead_s=0.0,
                              ps_task_overhead_s=0.0, reverse_traffic_share=0.0)


def var(name: str, shape: Sequence[int], grad: str = "dense", blocker: str | None = None) -> VariableInfo:
    return VariableInfo(name=name, shape=list(shape), dtype="float32", trainable=True, grad=grad,
                        partition_blocker=blocker)


def profile(graph: GraphItem, compute_s: float, rows: Mapping[str, float] | None = None) -> ModelProfile:
    """`rows`: mean distinct rows per step of each sparse variable."""
    return ModelProfile(graph=graph, compute_s=compute_s, steps_measured=10,
                        rows_touched={k: RowsTouched(mean=v, max=int(v)) for k, v in (rows or {}).items()})


def hosts_spec(count: int, workers: int = 1, ps: Sequence[int] | int = 1) -> ClusterSpec:
    """Hosts 10.0.0.1.. with `workers` workers each and `ps` PS each (or per host); the first is the chief."""
    per_host = [ps] * count if isinstance(ps, int) else list(ps)
    return ClusterSpec(version=1, nodes=[
        Node(address=f"10.0.0.{i + 1}", chief=i == 0, workers=workers, ps=per_host[i]) for i in range(count)
    ])


def network(spec: ClusterSpec, bytes_per_s: float, latency_s: float = 0.0,
            local_bytes_per_s: float = 1e15, local_latency_s: float = 0.0, burst_bytes: float = 0.0,
            queue_bytes: float = 0.0) -> NetworkFacts:
    """The same path between every two hosts of `spec`, in both directions."""
    hosts = [node.address for node in spec.nodes]
    return NetworkFacts(
        local=Link(bytes_per_s=local_bytes_per_s, latency_s=local_latency_s, source="assumed"),
        links=[HostLink(src=a, dst=b, bytes_per_s=bytes_per_s, latency_s=latency_s, burst_bytes=burst_bytes,
                        queue_bytes=queue_bytes, source="assumed")
               for a in hosts for b in hosts if a != b],
    )


def plan(graph: GraphItem, spec: ClusterSpec, variables: Sequence[VariablePlan], builder: str = "hand") -> Strategy:
    return Strategy(version=1, builder=builder, fingerprint=graph.fingerprint, num_workers=spec.num_workers,
                    num_ps=spec.num_ps, variables=list(variables), replica_devices=replica_devices(spec))


def planned(v: VariableInfo, **how) -> VariablePlan:
    """`v` with `sync=...` or `partition=...`."""
    return VariablePlan(name=v.name, shape=v.shape, dtype=v.dtype, grad=v.grad, **how)


# the benchmark's embed workload (bench/workloads/models.py `Embed`): a 1,000,000 x 32 table read by
# reduce_mean over bags of 32 uniform ids, 256 examples a step, and a 32 -> 512 -> 512 -> 1 head
EMBED_BATCH, EMBED_BAG = 256, 32
EMBED_HEAD = [("hidden1/kernel", [32, 512]), ("hidden1/bias", [512]), ("hidden2/kernel", [512, 512]),
              ("hidden2/bias", [512]), ("logit/kernel", [512, 1]), ("logit/bias", [1])]


def embed_graph(pooled: bool = True) -> GraphItem:
    """The embed workload's graph as capture describes it; `pooled`: with its table's pooled lookup
    (VariableInfo.pooled), else as captured before capture looked for them."""
    bags = PooledBags(examples=EMBED_BATCH, ids=EMBED_BATCH * EMBED_BAG) if pooled else None
    table = var("embedding", [1_000_000, 32], "sparse").model_copy(update={"pooled": bags})
    return GraphItem(batch_size=EMBED_BATCH, variables=[table, *(var(n, s) for n, s in EMBED_HEAD)])
