"""Auto: a per-variable strategy searched with the cost model (strategies/cost_model.py).

The search starts from the best-predicted plans of the built-in builders (default options; the
three best distinct ones, so that one start's local minimum is not the answer) and improves each
by coordinate descent: variables in order of bytes (largest first), each in turn given the choice
with the lowest predicted step time while the others stay as they are, until a whole round changes
nothing. A variable's choices: the whole variable on one PS; split on axis 0 into k shards
(2 <= k <= PS processes, each shard at least MIN_SHARD_BYTES) on k consecutive PSs; all-reduce in
one of the groups in use or a new one (the chunking of the all-reduce groups). By default every choice is exactly
data-parallel SGD: synchronous, uncompressed. `allow_lossy` adds the fp16 and PowerSGD compressors
for dense gradients and `allow_staleness` adds a staleness of one step on PS variables.

A TF2 script (`GraphItem.kind` "tf2") is planned among what TF2 mode can run, as
`document.tf2_refusals` says (per variable, then for the whole plan): built-in plans it refuses are not started from, and a
variable's choices it refuses are not offered. A rule about whole plans (the document's own checks)
is met too: a descent whose end point the document refuses is run again within the kinds of
synchronizer its start uses (all PS, or all all-reduce), and ends at its start if that is refused too.

The searched plan is Auto's only when its predicted lead over the best-predicted built-in plan (that
plan's step time over the searched one's, less 1) is more than TIE_MARGIN (the spread of the model's
errors between plans of one cluster); otherwise Auto's plan is that built-in plan, and its one-line
reason says so.

The result is an ordinary Strategy document (builder "Auto"), each variable's choice and its
predicted share of the synchronization time in its `note`. Deterministic: the same inputs give the
same plan (fixed visiting order, ties keep the current choice). Auto is a builder like the others:
it plans from the PlanningFacts it is given (the model profile, the network facts and the fitted
coefficients besides the graph and the spec, gathered beforehand by adrun/gathering.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from pydantic import Field

from adrun.errors import UserError
from adrun.graph_item import GraphItem, VariableInfo
from adrun.model_io import validate
from adrun.placement import ps
from adrun.spec import ClusterSpec

from . import BUILDERS, document
from .base import BuilderOptions, Decision, StrategyBuilder, axis0_rows, planned_grad
from .cost_model import (
    Coefficients, Load, Paths, StepCost, compute_seconds, pooled_bags_of, predict, variable_load,
)
from .document import AllReduceSync, Partition, PSSync, Strategy, VariablePlan
from .facts import ModelProfile, NetworkFacts, Prediction
from .optimizer_state import updates_read_step_state
from .planning_facts import Fact, PlanningFacts
from .wire_bound import replicas_per_worker

AUTO = "Auto"
START_PLANS = 3  # descents from the best-predicted distinct built-in plans
MAX_ROUNDS = 10  # coordinate-descent rounds; the search stops earlier when a round changes nothing
# a choice must beat the current one by this fraction of the step time: float noise never flips a tie
MIN_GAIN = 1e-9
# Auto's searched plan replaces the best-predicted built-in plan only when predicted faster by more
# than this fraction of that plan's step time. The model's errors differ between plans of one
# cluster: on the benchmark the largest predicted lead of one measured plan over another of the
# same group that measured as a loss is 9.9% (sparse datacenter 2 hosts, Parallax over
# PartitionedPS; bench/COST-MODEL-CHECK.md, "Predicted leads that measured as losses"); a lead
# within that is a tie, and a built-in plan is the one that has been run and measured.
TIE_MARGIN = 0.10
STALENESS = 1  # the bound offered with allow_staleness: the smallest that lets communication overlap
POWERSGD_RANK = 4
# the smallest shard worth splitting a variable for; TF's MinSizePartitioner uses 256 KiB
MIN_SHARD_BYTES = 64 * 2**10


class AutoOptions(BuilderOptions):
    """What Auto may consider beyond exactly synchronous, uncompressed data-parallel SGD."""

    allow_lossy: bool = Field(
        default=False, description="consider fp16 and PowerSGD compression of dense gradients (changes the mathematics)"
    )
    allow_staleness: bool = Field(
        default=False, description=f"consider a staleness of {STALENESS} step on PS variables (changes the mathematics)"
    )


class Auto(StrategyBuilder):
    """Per variable, the choice the cost model predicts fastest on this cluster (see strategies/auto.py).

    Options: `allow_lossy` (default false; consider fp16 and PowerSGD compression), `allow_staleness`
    (default false; consider a staleness of one step on PS variables). Choose it when you do not know
    which builder suits the model and the cluster: it profiles the script on one process, takes the
    network's bandwidth and latency (the spec's, stored, or measured) and the cost model fitted on this
    cluster's recorded runs, and may mix PS and all-reduce variables.
    """

    Options = AutoOptions
    options: AutoOptions
    needs = frozenset({Fact.PROFILE, Fact.NETWORK, Fact.FIT})

    @classmethod
    def from_cli(cls, options: Mapping[str, str]) -> Auto:
        """Auto configured from `--strategy-opt` pairs; a bad one is a UserError that names it (and
        the option meant, for a misspelt one)."""
        return cls(validate(AutoOptions, dict(options), f"{AUTO} options"))

    def build(self, facts: PlanningFacts) -> Strategy:
        """Auto's plan: the Auto entry of `rank`, its `reason` the ranking in one line."""
        ranked, by_margin = self._rank(facts)
        plan = next(plan for plan, _ in ranked if plan.builder == AUTO)
        assert facts.profile is not None
        return plan.model_copy(update={"reason": ranking_reason(ranked, by_margin, untimed=facts.profile.untimed)})

    def rank(self, facts: PlanningFacts) -> list[tuple[Strategy, Prediction]]:
        """Every built-in builder's plan (default options) and Auto's, with their predictions, best
        (shortest predicted step) first; ties keep registry order, Auto last. Auto's is the searched
        plan when predicted more than TIE_MARGIN faster than the best built-in plan, else that
        built-in plan."""
        return self._rank(facts)[0]

    def _rank(self, facts: PlanningFacts) -> tuple[list[tuple[Strategy, Prediction]], bool]:
        """`rank`'s list, and whether TIE_MARGIN decided Auto's plan (the search had ended on
        another plan than the best built-in one, not enough ahead of it)."""
        self.check_facts(facts)
        assert facts.profile is not None and facts.network is not None and facts.fit is not None
        c = facts.fit.coefficients
        spec, profile, network = facts.spec, facts.profile, facts.network
        plans = builtin_plans(facts)
        ranked = [(plan, predict(plan, profile, spec, network, c)) for plan in plans]
        variables = _search(facts.graph, spec, profile, network, c, self.options, [p for _, p in ranked], plans,
                            runnable=lambda variables: self._runnable(facts, variables))
        auto = self._document(facts, c, variables)
        prediction = predict(auto, profile, spec, network, c)
        best, best_prediction = min(ranked, key=lambda pair: pair[1].step_s)  # ties: registry order
        by_margin = False
        if best_prediction.step_s <= prediction.step_s * (1 + TIE_MARGIN):  # a lead of TIE_MARGIN or less
            by_margin = _keys(auto) != _keys(best)
            auto = self._document(facts, c, best.variables)
            prediction = predict(auto, profile, spec, network, c)
        ranked.append((auto, prediction))
        return sorted(ranked, key=lambda pair: pair[1].step_s), by_margin

    def _runnable(self, facts: PlanningFacts, variables: Sequence[VariablePlan]) -> bool:
        """Whether the document accepts `variables` as a plan of `facts` (for a TF2 script: whether
        TF2 mode can run it as a whole)."""
        try:
            self.document(facts, variables)
        except UserError:
            return False
        return True

    def _document(self, facts: PlanningFacts, c: Coefficients, plans: Sequence[VariablePlan]) -> Strategy:
        """The Strategy of `plans`, validated by the document's own checks, with each variable's
        choice and predicted share of the synchronization time in its note."""
        assert facts.profile is not None and facts.network is not None

        def strategy(variables: Sequence[VariablePlan]) -> Strategy:
            return self.document(facts, [VariablePlan.model_validate(v.model_dump()) for v in variables])

        document = strategy(plans)
        shares = predict(document, facts.profile, facts.spec, facts.network, c).variable_share
        blockers = {v.name: v.partition_blocker for v in facts.graph.trainable_with_grads()}
        replicas = replicas_per_worker(document)
        noted = [
            plan.model_copy(update={"note": _note(plan, shares.get(plan.name, 0.0), blockers.get(plan.name), facts.spec,
                                                  pooled_bags_of(plan, facts.profile, document.num_workers,
                                                                 replicas) is not None)})
            for plan in plans
        ]
        return strategy(noted)


def ranking_reason(ranked: Sequence[tuple[Strategy, Prediction]], by_margin: bool, untimed: bool = False) -> str:
    """`predicted step 12.1 ms; next: AllReduce 13.0 ms, PartitionedAR 14.2 ms`: Auto's predicted
    step time beside the next two builders' (of `rank`'s list), and when Auto's plan is a built-in
    builder's, which one and why: the search ended on it, or (`by_margin`) TIE_MARGIN kept it over
    the searched plan; `untimed`: the profile timed no step, so the times are the communication's
    alone, and the line says so."""
    plan, auto = next((plan, prediction) for plan, prediction in ranked if plan.builder == AUTO)
    others = [f"{plan.builder} {_ms(prediction.step_s)}" for plan, prediction in ranked if plan.builder != AUTO][:2]
    line = f"predicted step {_ms(auto.step_s)}" + (f"; next: {', '.join(others)}" if others else "")
    same = next((other.builder for other, _ in ranked if other.builder != AUTO and _keys(other) == _keys(plan)), None)
    if same is not None and by_margin:
        line += (f"; {same}'s plan (a searched plan must be predicted more than {TIE_MARGIN:.0%} faster than "
                 "the best built-in one)")
    elif same is not None:
        line += f"; {same}'s plan (the search found none faster)"
    if untimed:
        line += " (no step was timed: planned from the model's facts and the network alone, compute not counted)"
    return line


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def builtin_plans(facts: PlanningFacts) -> list[Strategy]:
    """Every built-in builder's plan with default options, in registry order; builders that cannot
    plan this graph on this cluster (e.g. PS builders without a PS process) are left out."""
    plans = []
    for builder in BUILDERS.values():
        try:
            plans.append(builder().build(facts))
        except UserError:
            continue
    return plans


def _search(
    item: GraphItem,
    spec: ClusterSpec,
    profile: ModelProfile,
    network: NetworkFacts,
    c: Coefficients,
    options: AutoOptions,
    predictions: Sequence[Prediction],
    plans: Sequence[Strategy],
    runnable: Callable[[Sequence[VariablePlan]], bool],
) -> list[VariablePlan]:
    """Coordinate descent from each of the START_PLANS best-predicted distinct built-in plans; the
    best end point wins (ties: the better start), its all-reduce groups renumbered. An end point
    that is not `runnable` as a whole: the descent again within the start's kinds of synchronizer,
    else the start itself (a built-in plan, runnable)."""
    descent = _Descent(item, spec, profile, network, c, options, compute_seconds(plans[0], profile))
    starts: dict[tuple[str, ...], tuple[Strategy, float]] = {}
    for i in sorted(range(len(plans)), key=lambda i: predictions[i].step_s):
        starts.setdefault(tuple(_key(v) for v in plans[i].variables), (plans[i], predictions[i].step_s))
    best: tuple[list[VariablePlan], float] | None = None
    for start, start_s in list(starts.values())[:START_PLANS]:
        variables, seconds = descent.run(start.variables)
        if not runnable(variables):
            variables, seconds = descent.run(start.variables, kinds=_sync_kinds(start.variables))
        if not runnable(variables):
            variables, seconds = list(start.variables), start_s
        if best is None or seconds < best[1] * (1 - MIN_GAIN):
            best = variables, seconds
    assert best is not None
    return _renumber_groups(best[0])


def _sync_kinds(plans: Sequence[VariablePlan]) -> frozenset[str]:
    """The kinds of synchronizer (`ps`, `allreduce`) `plans` use."""
    return frozenset(s.kind for plan in plans for s in plan.synchronizers())


def _key(plan: VariablePlan) -> str:
    """What makes two plans of a variable the same choice (the note does not)."""
    return plan.model_dump_json(exclude={"note"})


def _keys(strategy: Strategy) -> list[str]:
    """What makes two strategies the same plan."""
    return [_key(v) for v in strategy.variables]


# One variable's choice, cheap to make and compare during the search: ("ps", task, staleness),
# ("split", PS task of each shard, staleness), ("allreduce", group, compressor), or ("given", key) for
# a start plan's own (any plan a built-in builder made).
Choice = tuple


class _Descent:
    """Coordinate descent over the variables' choices; each choice's plan and load made once."""

    def __init__(self, item: GraphItem, spec: ClusterSpec, profile: ModelProfile, network: NetworkFacts,
                 c: Coefficients, options: AutoOptions, compute_s: float) -> None:
        self.infos = item.trainable_with_grads()
        self.spec, self.profile, self.c, self.compute_s = spec, profile, c, compute_s
        self.paths = Paths.of(spec, network)
        self.own_updates_barrier = updates_read_step_state(profile.graph)
        runs = _runs_in(item)
        self.placements = [[p for p in _placements(v, spec, options) if runs(_plan(v, p))] for v in self.infos]
        self.compressors = [[k for k in _compressors(v, options) if runs(_plan(v, ("allreduce", 0, k)))]
                            for v in self.infos]
        self.given: dict[str, VariablePlan] = {}
        self.plans: dict[tuple[int, Choice], VariablePlan] = {}
        # variables of one shape, dtype and kind load the links alike (a sparse one by its own rows)
        self.kinds = [(tuple(v.shape), v.dtype, v.grad, v.name if v.grad == "sparse" else "") for v in self.infos]
        self.loads: dict[tuple[tuple, Choice], Load] = {}
        # largest variables first: their choice shapes the load the small ones are fitted around
        self.order = sorted(range(len(self.infos)), key=lambda i: (-self.infos[i].nbytes, i))

    def plan(self, i: int, choice: Choice) -> VariablePlan:
        if (i, choice) not in self.plans:
            self.plans[i, choice] = self.given[choice[1]] if choice[0] == "given" else _plan(self.infos[i], choice)
        return self.plans[i, choice]

    def load(self, i: int, choice: Choice) -> Load:
        key = (self.kinds[i], choice)
        if key not in self.loads:
            self.loads[key] = variable_load(self.plan(i, choice), self.profile, self.paths)
        return self.loads[key]

    def groups(self, i: int, choice: Choice) -> set[int]:
        """The all-reduce groups the choice puts variable i in."""
        if choice[0] == "allreduce":
            return {choice[1]}
        if choice[0] == "given":
            return {s.group for s in self.plan(i, choice).synchronizers() if isinstance(s, AllReduceSync)}
        return set()

    def step_s(self, total: Load) -> float:
        return StepCost(self.paths, total, self.compute_s, self.own_updates_barrier).time(self.c).step

    def run(self, start: Sequence[VariablePlan],
            kinds: frozenset[str] = frozenset({"ps", "allreduce"})) -> tuple[list[VariablePlan], float]:
        """The end point of the descent from `start` among choices of synchronizers of `kinds`, and
        its predicted step time."""
        current: list[Choice] = []
        for plan in start:
            key = _key(plan)
            self.given.setdefault(key, plan)
            current.append(("given", key))
        total = Load.empty(self.paths)
        in_use: Counter[int] = Counter()
        for i, choice in enumerate(current):
            total.add(self.load(i, choice))
            in_use.update(self.groups(i, choice))
        best = self.step_s(total)
        for _ in range(MAX_ROUNDS):
            changed = False
            for i in self.order:
                mine = self.groups(i, current[i])
                others = sorted(g for g, n in in_use.items() if n - (g in mine) > 0)
                groups = [*others, max(others, default=-1) + 1]  # a group in use, or a new one
                candidates = ((self.placements[i] if "ps" in kinds else [])
                              + [("allreduce", g, comp) for comp in self.compressors[i] for g in groups
                                 if "allreduce" in kinds])
                for candidate in candidates:
                    if candidate == current[i]:
                        continue
                    trial = total.copy()
                    trial.add(self.load(i, current[i]), -1)
                    trial.add(self.load(i, candidate))
                    seconds = self.step_s(trial)
                    if seconds < best * (1 - MIN_GAIN):
                        in_use.subtract(self.groups(i, current[i]))
                        in_use.update(self.groups(i, candidate))
                        best, total, current[i], changed = seconds, trial, candidate, True
            if not changed:
                break
        return [self.plan(i, choice) for i, choice in enumerate(current)], best


def _placements(var: VariableInfo, spec: ClusterSpec, options: AutoOptions) -> list[Choice]:
    """The PS choices for `var`, in a fixed order: whole on each PS, then split into k shards on k
    consecutive PSs from each PS, when splitting is possible and every shard keeps MIN_SHARD_BYTES."""
    staleness = [0, STALENESS] if options.allow_staleness else [0]
    choices: list[Choice] = [("ps", p, s) for s in staleness for p in range(spec.num_ps)]
    if _partitionable(var):
        most = min(spec.num_ps, var.shape[0], max(1, var.nbytes // MIN_SHARD_BYTES))
        choices += [("split", tuple((first + i) % spec.num_ps for i in range(k)), s)
                    for s in staleness for k in range(2, most + 1) for first in range(spec.num_ps)]
    return choices


def _runs_in(item: GraphItem) -> Callable[[VariablePlan], bool]:
    """Whether `item`'s script can run a variable's plan: a TF2 script, when `tf2_refusals` refuses
    nothing of the variable's plan on its own (rules about whole plans, such as not mixing PS and
    all-reduce, are met by the whole-plan check of the descent); a graph-mode script, always."""
    if item.kind != "tf2":
        return lambda plan: True
    return lambda plan: not document.tf2_refusals([plan], keras=item.keras)


def _compressors(var: VariableInfo, options: AutoOptions) -> list[str]:
    return ["none"] + (["fp16", "powersgd"] if options.allow_lossy and var.grad == "dense" else [])


def _plan(var: VariableInfo, choice: Choice) -> VariablePlan:
    """The plan of one of `_placements`' or an all-reduce choice."""
    if choice[0] == "ps":
        how = Decision(sync=PSSync(ps_task=choice[1], staleness=choice[2]))
    elif choice[0] == "split":
        how = Decision(partition=Partition(axis=0, shards=[PSSync(ps_task=p, staleness=choice[2]) for p in choice[1]]))
    else:
        compressor = choice[2]
        how = Decision(sync=AllReduceSync(group=choice[1], compressor=compressor,
                                          powersgd_rank=POWERSGD_RANK if compressor == "powersgd" else 1))
    return VariablePlan(name=var.name, shape=var.shape, dtype=var.dtype, grad=planned_grad(var),
                        sync=how.sync, partition=how.partition)


def _partitionable(var: VariableInfo) -> bool:
    """Whether the runtime can split `var` on axis 0, as the partitioning builders decide it
    (and no other axis has an unknown size, which the document refuses in a partition)."""
    return axis0_rows(var)[0] >= 2 and -1 not in var.shape


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


def _note(plan: VariablePlan, share: float, blocker: str | None, spec: ClusterSpec, pooled: bool = False) -> str:
    """The plan's choice for the variable, its predicted share of the synchronization time, and why
    it is whole when it could not be split; `pooled`: its lookups pool over their bags on the PS
    (cost_model.pooled_bags_of), which the choice then says."""
    if plan.partition is not None:
        tasks = ", ".join(ps(s.ps_task).tag for s in plan.partition.shards if isinstance(s, PSSync))
        choice = f"partitioned into {len(plan.partition.shards)} shards on {tasks}"
    elif isinstance(plan.sync, PSSync):
        choice = f"on {ps(plan.sync.ps_task).tag}"
    else:
        assert isinstance(plan.sync, AllReduceSync)
        choice = f"all-reduce group {plan.sync.group}"
    syncs = plan.synchronizers()
    if any(isinstance(s, AllReduceSync) and s.compressor != "none" for s in syncs):
        choice += f", compressor {syncs[0].compressor}"  # type: ignore[union-attr]
    if any(isinstance(s, PSSync) and s.staleness for s in syncs):
        choice += f", staleness {STALENESS}"
    if pooled:
        choice += ", lookups pooled on the PS"
    parts = [choice, f"predicted {share:.1%} of sync time"]
    if blocker is not None and spec.num_ps >= 2:
        parts.append(f"not partitioned: {blocker}")
    return "; ".join(parts)
