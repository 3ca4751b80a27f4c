"""Auto: a per-variable strategy searched with the cost model (strategies/cost_model.py).

The search starts from the best-predicted plans of the built-in builders (default options; the
three best distinct ones, so that one start's local minimum is not the answer) and improves each
by coordinate descent: variables in order of bytes (largest first), each in turn
given the choice with the lowest predicted step time while the others stay as they are, until a
whole round changes nothing. A variable's choices: the whole variable on one PS; split on axis 0
into k shards (2 <= k <= PS processes) on k consecutive PSs; all-reduce in one of the groups in use
or a new one (the chunking of the all-reduce groups). By default every choice is exactly
data-parallel SGD: synchronous, uncompressed. `allow_lossy` adds the fp16 and PowerSGD compressors
for dense gradients and `allow_staleness` adds a staleness of one step on PS variables.

The result is an ordinary Strategy document (builder "Auto"), each variable's choice and its
predicted share of the synchronization time in its `note`. Deterministic: the same inputs give the
same plan (fixed visiting order, ties keep the current choice).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from adrun.errors import UserError
from adrun.graph_item import GraphItem, VariableInfo
from adrun.spec import ClusterSpec

from . import BUILDERS
from .base import BuilderOptions
from .cost_model import Coefficients, Load, Paths, StepCost, compute_seconds, predict, variable_load
from .document import AllReduceSync, Partition, PSSync, Strategy, VariablePlan
from .facts import ModelProfile, NetworkFacts, Prediction

AUTO = "Auto"
START_PLANS = 3  # descents from the best-predicted distinct built-in plans
MAX_ROUNDS = 10  # coordinate-descent rounds; the search stops earlier when a round changes nothing
# a choice must beat the current one by this fraction of the step time: float noise never flips a tie
MIN_GAIN = 1e-9
STALENESS = 1  # the bound offered with allow_staleness: the smallest that lets communication overlap
POWERSGD_RANK = 4


class AutoOptions(BuilderOptions):
    allow_lossy: bool = Field(
        default=False, description="consider fp16 and PowerSGD compression of dense gradients (changes the mathematics)"
    )
    allow_staleness: bool = Field(
        default=False, description=f"consider a staleness of {STALENESS} step on PS variables (changes the mathematics)"
    )


def builtin_plans(item: GraphItem, spec: ClusterSpec) -> list[Strategy]:
    """Every built-in builder's plan with default options, in registry order; builders that cannot
    plan this graph on this cluster (e.g. PS builders without a PS process) are left out."""
    plans = []
    for builder in BUILDERS.values():
        try:
            plans.append(builder().build(item, spec))
        except UserError:
            continue
    return plans


def rank_builders(
    item: GraphItem,
    spec: ClusterSpec,
    profile: ModelProfile,
    network: NetworkFacts,
    coefficients: Coefficients | None = None,
    options: AutoOptions | None = None,
) -> list[tuple[Strategy, Prediction]]:
    """Every built-in builder's plan (default options) and Auto's, with their predictions, best
    (shortest predicted step) first; ties keep registry order, Auto last."""
    c = coefficients or Coefficients.analytical()
    plans = builtin_plans(item, spec)
    ranked = [(plan, predict(plan, profile, spec, network, c)) for plan in plans]
    auto = _search(item, spec, profile, network, c, options or AutoOptions(), [p for _, p in ranked], plans)
    ranked.append((auto, predict(auto, profile, spec, network, c)))
    return sorted(ranked, key=lambda pair: pair[1].step_s)


def plan_auto(
    item: GraphItem,
    spec: ClusterSpec,
    profile: ModelProfile,
    network: NetworkFacts,
    coefficients: Coefficients | None = None,
    options: AutoOptions | None = None,
) -> Strategy:
    """Auto's plan of `item` on `spec` (see the module docstring)."""
    c = coefficients or Coefficients.analytical()
    plans = builtin_plans(item, spec)
    predictions = [predict(plan, profile, spec, network, c) for plan in plans]
    return _search(item, spec, profile, network, c, options or AutoOptions(), predictions, plans)


def _search(
    item: GraphItem,
    spec: ClusterSpec,
    profile: ModelProfile,
    network: NetworkFacts,
    c: Coefficients,
    options: AutoOptions,
    predictions: Sequence[Prediction],
    plans: Sequence[Strategy],
) -> Strategy:
    """Coordinate descent from each of the START_PLANS best-predicted distinct built-in plans; the
    best end point wins (ties: the better start)."""
    if profile.graph.fingerprint != item.fingerprint:
        raise ValueError(f"the profile is of graph {profile.graph.fingerprint}, not of this graph ({item.fingerprint})")
    descent = _Descent(item, spec, profile, network, c, options, compute_seconds(plans[0], profile))
    starts: dict[tuple[str, ...], Strategy] = {}
    for i in sorted(range(len(plans)), key=lambda i: predictions[i].step_s):
        starts.setdefault(tuple(_key(v) for v in plans[i].variables), plans[i])
    best: tuple[list[VariablePlan], float] | None = None
    for start in list(starts.values())[:START_PLANS]:
        variables, seconds = descent.run(list(start.variables))
        if best is None or seconds < best[1] * (1 - MIN_GAIN):
            best = variables, seconds
    assert best is not None
    return _document(item, spec, profile, network, c, options, _renumber_groups(best[0]))


def _key(plan: VariablePlan) -> str:
    """What makes two plans of a variable the same choice (the note does not)."""
    return plan.model_dump_json(exclude={"note"})


class _Descent:
    """Coordinate descent over the variables' choices, with each choice's load computed once."""

    def __init__(self, item: GraphItem, spec: ClusterSpec, profile: ModelProfile, network: NetworkFacts,
                 c: Coefficients, options: AutoOptions, compute_s: float) -> None:
        self.infos = item.trainable_with_grads()
        self.spec, self.profile, self.c, self.options, self.compute_s = spec, profile, c, options, compute_s
        self.paths = Paths.of(spec, network)
        self.loads: dict[tuple[int, str], Load] = {}
        # largest variables first: their choice shapes the load the small ones are fitted around
        self.order = sorted(range(len(self.infos)), key=lambda i: (-self.infos[i].nbytes, i))

    def load(self, i: int, plan: VariablePlan) -> Load:
        key = (i, _key(plan))
        if key not in self.loads:
            self.loads[key] = variable_load(plan, self.profile, self.paths)
        return self.loads[key]

    def step_s(self, total: Load) -> float:
        return StepCost(self.paths, total, self.compute_s).time(self.c).step

    def run(self, current: list[VariablePlan]) -> tuple[list[VariablePlan], float]:
        """The end point of the descent from `current`, and its predicted step time."""
        total = Load.empty(self.paths)
        for i, plan in enumerate(current):
            total.add(self.load(i, plan))
        best = self.step_s(total)
        for _ in range(MAX_ROUNDS):
            changed = False
            for i in self.order:
                for candidate in _choices(self.infos[i], self.spec, _groups_in_use(current, i), self.options):
                    trial = total.copy()
                    trial.add(self.load(i, current[i]), -1)
                    trial.add(self.load(i, candidate))
                    seconds = self.step_s(trial)
                    if seconds < best * (1 - MIN_GAIN):
                        best, total, current[i], changed = seconds, trial, candidate, True
            if not changed:
                break
        return current, best


def _groups_in_use(plans: Sequence[VariablePlan], skip: int) -> list[int]:
    """All-reduce groups of the other variables, plus one new group."""
    groups = sorted({s.group for j, p in enumerate(plans) if j != skip
                     for s in p.synchronizers() if isinstance(s, AllReduceSync)})
    return groups + [max(groups, default=-1) + 1]


def _choices(
    var: VariableInfo, spec: ClusterSpec, groups: Sequence[int], options: AutoOptions
) -> list[VariablePlan]:
    """Every plan Auto considers for `var`, in a fixed order."""
    staleness = [0, STALENESS] if options.allow_staleness else [0]
    syncs: list[PSSync | AllReduceSync | Partition] = [
        PSSync(ps_task=p, staleness=s) for s in staleness for p in range(spec.num_ps)
    ]
    if _partitionable(var):
        syncs += [
            Partition(axis=0, shards=[PSSync(ps_task=(first + i) % spec.num_ps, staleness=s) for i in range(k)])
            for s in staleness
            for k in range(2, min(spec.num_ps, var.shape[0]) + 1)
            for first in range(spec.num_ps)
        ]
    compressors = ["none"] + (["fp16", "powersgd"] if options.allow_lossy and var.grad == "dense" else [])
    syncs += [
        AllReduceSync(group=g, compressor=comp, powersgd_rank=POWERSGD_RANK if comp == "powersgd" else 1)
        for comp in compressors for g in groups
    ]
    return [
        VariablePlan(name=var.name, shape=var.shape, dtype=var.dtype, grad=var.grad,
                     **({"partition": s} if isinstance(s, Partition) else {"sync": s}))
        for s in syncs
    ]


def _partitionable(var: VariableInfo) -> bool:
    """Whether the runtime can split `var` on axis 0, as the partitioning builders check."""
    return (var.partition_blocker is None and len(var.shape) >= 1 and -1 not in var.shape
            and var.shape[0] >= 2)


def _renumber_groups(plans: Sequence[VariablePlan]) -> list[VariablePlan]:
    """All-reduce groups numbered 0, 1, ... in order of first use."""
    number: dict[int, int] = {}
    for plan in plans:
        for s in plan.synchronizers():
            if isinstance(s, AllReduceSync):
                number.setdefault(s.group, len(number))

    def renumbered(s: PSSync | AllReduceSync) -> PSSync | AllReduceSync:
        return s.model_copy(update={"group": number[s.group]}) if isinstance(s, AllReduceSync) else s

    out = []
    for plan in plans:
        if plan.partition is not None:
            shards = [renumbered(s) for s in plan.partition.shards]
            out.append(plan.model_copy(update={"partition": plan.partition.model_copy(update={"shards": shards})}))
        else:
            assert plan.sync is not None
            out.append(plan.model_copy(update={"sync": renumbered(plan.sync)}))
    return out


def _document(
    item: GraphItem,
    spec: ClusterSpec,
    profile: ModelProfile,
    network: NetworkFacts,
    c: Coefficients,
    options: AutoOptions,
    plans: Sequence[VariablePlan],
) -> Strategy:
    """The Strategy of `plans`, validated by the document's own checks, with each variable's choice
    and predicted share of the synchronization time in its note."""
    def strategy(variables: Sequence[VariablePlan]) -> Strategy:
        return Strategy(
            version=1, builder=AUTO, options=options.model_dump(), fingerprint=item.fingerprint,
            num_workers=spec.num_workers, num_ps=spec.num_ps,
            variables=[VariablePlan.model_validate(v.model_dump()) for v in variables],
            replica_devices=spec.replica_devices(),
        )

    shares = predict(strategy(plans), profile, spec, network, c).variable_share
    blockers = {v.name: v.partition_blocker for v in item.trainable_with_grads()}
    noted = [
        plan.model_copy(update={"note": _note(plan, shares.get(plan.name, 0.0), blockers.get(plan.name), spec)})
        for plan in plans
    ]
    return strategy(noted)


def _note(plan: VariablePlan, share: float, blocker: str | None, spec: ClusterSpec) -> str:
    if plan.partition is not None:
        tasks = ", ".join(f"ps:{s.ps_task}" for s in plan.partition.shards if isinstance(s, PSSync))
        choice = f"partitioned into {len(plan.partition.shards)} shards on {tasks}"
    elif isinstance(plan.sync, PSSync):
        choice = f"on ps:{plan.sync.ps_task}"
    else:
        assert isinstance(plan.sync, AllReduceSync)
        choice = f"all-reduce group {plan.sync.group}"
    syncs = plan.synchronizers()
    if any(isinstance(s, AllReduceSync) and s.compressor != "none" for s in syncs):
        choice += f", compressor {syncs[0].compressor}"  # type: ignore[union-attr]
    if any(isinstance(s, PSSync) and s.staleness for s in syncs):
        choice += f", staleness {STALENESS}"
    parts = [choice, f"predicted {share:.1%} of sync time"]
    if blocker is not None and spec.num_ps >= 2:
        parts.append(f"not partitioned: {blocker}")
    return "; ".join(parts)
