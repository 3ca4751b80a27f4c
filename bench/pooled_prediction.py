"""What the cost model predicts for the benchmark's workloads with lookups pooled on the PS, and without.

    .venv/bin/python -m bench.pooled_prediction --workloads embed,sparse --hosts 4 --profile commodity \\
        --compute-s embed=0.0055 --compute-s sparse=0.0073

A prediction, not a measurement: each workload's graph is captured by adrun (its table's
`VariableInfo.pooled` included), its rows touched counted from its own data and the link and
machine taken as bench/cost_model_check.py takes them; then Auto ranks every built-in builder and
its own plan twice, with the analytical coefficients: `rows`, the graph without its pooled facts
(the terms before pooled lookups were counted, what the runtime did until then), and `pooled`,
as captured (a PS-held table's lookups pooled, `pool_bags` true). Per builder: predicted step,
examples/s and bytes its busiest host sends a step; Auto's ratio to PartitionedPS, to AllReduce, to the
best uniform builder and to the best built-in one; and the plan Auto chose without the pooled facts,
predicted with them. Writes JSON (`--out`) and a markdown table (`--markdown`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import click

from adrun.capture_run import capture_graph
from adrun.strategies.auto import AUTO, Auto
from adrun.strategies.document import AllReduceSync, PSSync, Strategy
from adrun.strategies.cost_model import predict
from adrun.strategies.facts import ModelProfile, Prediction
from adrun.strategies.fit import fit
from adrun.strategies.planning_facts import PlanningFacts

from .cluster.network import PROFILES
from .cluster.tf2 import script_args
from .cost_model_check import cluster_spec, model_profile, network_facts, without_pooled
from .paths import BENCH, RESULTS_DIR, WORKLOADS_DIR

CPUS = 2  # the benchmark machine's CPUs, which its namespace hosts share (bench/results/*.json `machine`)


def plan_summary(plan: Strategy) -> str:
    """`embedding: 4 shards on ps0-3; 6 dense all-reduced`: where the plan puts each variable, short."""
    parts, reduced = [], 0
    for var in plan.variables:
        syncs = var.synchronizers()
        if all(isinstance(s, AllReduceSync) for s in syncs):
            reduced += 1
            continue
        tasks = sorted({s.ps_task for s in syncs if isinstance(s, PSSync)})
        where = f"{len(syncs)} shards on ps{','.join(map(str, tasks))}" if len(syncs) > 1 else f"ps{tasks[0]}"
        parts.append(f"{var.name}: {where}")
    return "; ".join(parts + ([f"{reduced} all-reduced"] if reduced else []))


UNIFORM = ("AllReduce", "PartitionedAR", "RandomAxisPartitionAR", "PS", "PSLoadBalancing", "PartitionedPS",
           "UnevenPartitionedPS")  # one family for every variable (Parallax mixes: sparse on PSs, dense all-reduced)


class BuilderRow(TypedDict):
    """One plan's prediction: its step, examples/s, the bytes its busiest host sends a step (as
    `adrun profile`'s scaling points report them), what bounds it and where it puts the variables."""

    step_ms: float
    examples_per_s: float
    sent_mb_per_host: float  # the busiest host's
    bound: str
    plan: str


class Ranking(TypedDict, total=False):
    builders: dict[str, BuilderRow]
    auto_over_partitioned_ps: float
    auto_over_all_reduce: float
    auto_over_best_uniform: float
    auto_over_best_builtin: float
    other_plan: BuilderRow  # only when a plan is given to predict beside the ranking


class Group(TypedDict):
    workload: str
    profile: str
    hosts: int
    compute_s: float
    pooled_facts: dict[str, dict[str, int | None]]
    rows: Ranking
    pooled: Ranking


def _row(plan: Strategy, prediction: Prediction) -> BuilderRow:
    if prediction.examples_per_s is None:
        raise ValueError("the workload's graph has no batch size: examples/s cannot be predicted")
    return {"step_ms": prediction.step_s * 1e3, "examples_per_s": prediction.examples_per_s,
            "sent_mb_per_host": max(b.sent for b in prediction.node_bytes.values()) / 1e6,
            "bound": prediction.bound, "plan": plan_summary(plan)}


def ranking(profile: ModelProfile, hosts: int, link: str, other: Strategy | None = None) -> tuple[Ranking, Strategy]:
    """Auto's ranking on the benchmark's cluster of `hosts` hosts, Auto's ratios, and its plan;
    with `other` (a plan of the same graph), its prediction too, as `other_plan`."""
    spec = cluster_spec(hosts)
    net = network_facts(PROFILES[link], spec, CPUS)
    ranked = Auto().rank(PlanningFacts(spec=spec, graph=profile.graph, profile=profile, network=net, fit=fit([])))
    builders = {plan.builder: _row(plan, prediction) for plan, prediction in ranked}
    auto = builders[AUTO]["examples_per_s"]
    out: Ranking = {
        "builders": builders, "auto_over_partitioned_ps": auto / builders["PartitionedPS"]["examples_per_s"],
        "auto_over_all_reduce": auto / builders["AllReduce"]["examples_per_s"],
        "auto_over_best_uniform": auto / max(builders[b]["examples_per_s"] for b in UNIFORM if b in builders),
        "auto_over_best_builtin": auto / max(b["examples_per_s"] for name, b in builders.items() if name != AUTO)}
    if other is not None:
        out["other_plan"] = _row(other, predict(other, profile, spec, net))
    return out, next(plan for plan, _ in ranked if plan.builder == AUTO)


def render(groups: list[Group], command: str) -> str:
    lines = ["# Lookups pooled on the PS: the cost model's predictions before and after", "",
             f"Made by `{command}` (bench/pooled_prediction.py: predictions, nothing run on the cluster). "
             "`rows`: the graph without its pooled facts (each shard's distinct rows pulled and pushed, "
             "as the runtime did before pooling); `pooled`: as captured, every PS-held table whose lookups "
             "pool counting its partial sums, ids and d_sum (docs/cost-model.md). Analytical coefficients; "
             f"namespace hosts sharing {CPUS} CPUs, 1 worker + 1 PS each.", ""]
    for group in groups:
        lines += [f"## {group['workload']}, {group['profile']}, {group['hosts']} hosts", "",
                  f"Compute {group['compute_s'] * 1e3:.1f} ms a step; pooled facts captured: {group['pooled_facts'] or 'none'}.", "",
                  "| builder | rows: step ms | rows: examples/s | rows: MB sent, busiest host | pooled: step ms | "
                  "pooled: examples/s | pooled: MB sent, busiest host | pooled / rows |",
                  "|---|---|---|---|---|---|---|---|"]
        before, after = group["rows"]["builders"], group["pooled"]["builders"]
        for name in sorted(after, key=lambda b: after[b]["step_ms"]):
            b, a = before[name], after[name]
            lines.append(f"| {name} | {b['step_ms']:.1f} | {b['examples_per_s']:,.0f} | {b['sent_mb_per_host']:.2f} | "
                         f"{a['step_ms']:.1f} | {a['examples_per_s']:,.0f} | {a['sent_mb_per_host']:.2f} | "
                         f"{a['examples_per_s'] / b['examples_per_s']:.2f} |")
        lines += ["", "| | rows | pooled |", "|---|---|---|"]
        for label, ratio in (("Auto / PartitionedPS", lambda r: r["auto_over_partitioned_ps"]),
                             ("Auto / AllReduce", lambda r: r["auto_over_all_reduce"]),
                             ("Auto / best uniform builder (one family for all variables)",
                              lambda r: r["auto_over_best_uniform"]),
                             ("Auto / best built-in builder (Parallax included)", lambda r: r["auto_over_best_builtin"])):
            lines.append(f"| {label} | {ratio(group['rows']):.2f} | {ratio(group['pooled']):.2f} |")
        kept = group["pooled"]["other_plan"]
        lines += ["", f"Auto's plan, rows: {before[AUTO]['plan']}; pooled: {after[AUTO]['plan']}. Auto's rows plan "
                  f"predicted with the pooled terms: {kept['step_ms']:.1f} ms, {kept['examples_per_s']:,.0f} "
                  f"examples/s, {kept['sent_mb_per_host']:.2f} MB sent by the busiest host.", ""]
    return "\n".join(lines)


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--workloads", default="embed,sparse", show_default=True)
@click.option("--hosts", type=int, default=4, show_default=True)
@click.option("--profile", "link", type=click.Choice(sorted(PROFILES)), default="commodity", show_default=True)
@click.option("--compute-s", "compute_given", multiple=True, metavar="WORKLOAD=SECONDS", required=True,
              help="compute time per step of a workload on one process (bench/COST-MODEL-CHECK.md lists the measured ones)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=RESULTS_DIR / "pooled-prediction.json", show_default=True)
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path),
              default=BENCH / "RESULTS-pooled-prediction.md", show_default=True)
def main(workloads: str, hosts: int, link: str, compute_given: tuple[str, ...], out: Path, markdown: Path) -> None:
    compute = {w: float(s) for w, s in (item.split("=", 1) for item in compute_given)}
    groups: list[Group] = []
    for workload in workloads.split(","):
        script, *args = script_args(workload)
        graph = capture_graph(WORKLOADS_DIR / script, [*args, "--steps", "2", "--warmup", "1"], 1,
                              f"pooled-prediction-{workload}")
        profile = model_profile(workload, graph, hosts, compute[workload])
        pooled = {v.name: v.pooled.model_dump() for v in graph.variables if v.pooled is not None}
        rows, rows_auto = ranking(profile.model_copy(update={"graph": without_pooled(graph)}), hosts, link)
        groups.append({"workload": workload, "profile": link, "hosts": hosts, "compute_s": compute[workload],
                       "pooled_facts": pooled,
                       "rows": rows, "pooled": ranking(profile, hosts, link, rows_auto)[0]})
    command = ("python -m bench.pooled_prediction --workloads " + workloads + f" --hosts {hosts} --profile {link} "
               + " ".join(f"--compute-s {c}" for c in compute_given))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": command, "groups": groups}, indent=2) + "\n")
    markdown.write_text(render(groups, command) + "\n")
    click.echo(f"pooled-prediction: wrote {out} and {markdown}")


if __name__ == "__main__":
    main()
