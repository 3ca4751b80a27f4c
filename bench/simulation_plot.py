"""The simulation of issue 21 against the benchmark: predicted scaling curves beside measured runs.

    .venv/bin/python -m bench.simulation_plot embed bench/results/cluster-embed-4h.json ... \
        --hosts 1,2,4,8,16,32 --out bench/results/embed-commodity-simulation.png

Two predictions per builder, from the same facts `bench/cost_model_check.py` feeds the model (the
captured graph, the touched rows of the workers' batches, the compute time of the 1-host run, the
profile's link in TCP payload bytes) and the analytical coefficients:

- the curve, as `adrun profile --hosts` draws it (adrun/profile/scaling.py): N hosts of the
  benchmark's kind (1 worker + 1 PS each), each its own machine: the "what if" answer;
- at the host counts that were measured, the same hosts as the benchmark ran them, namespaces
  sharing one machine's CPUs (`NetworkFacts.shared_cpus`): what the measured points are judged
  against (bench/COST-MODEL-CHECK.md).

The measured medians are drawn over both; the published anchors (adrun/profile/report.py, from
../shared/reference/comm-cost-anchors.md) beside the curves. Writes the PNG and, beside it, JSON
with every figure drawn.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import click

from adrun.capture_run import capture_graph
from adrun.profile.report import ANCHORS
from adrun.profile.scaling import parse_host_counts, scaling_section
from adrun.strategies import build_strategy
from adrun.strategies.auto import AUTO, Auto
from adrun.strategies.cost_model import Coefficients, predict
from adrun.strategies.fit import FitResult
from adrun.strategies.planning_facts import PlanningFacts

from .cost_model_check import (
    LINK_PLANNED,
    cluster_spec,
    link_planned,
    machine_cpus,
    measured_rates,
    model_profile,
    network_facts,
)
from .paths import PLANS_DIR, WORKLOADS_DIR


@click.command(help=__doc__.split("\n\n")[0])
@click.argument("workload")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--profile", "profile_name", default="commodity", show_default=True, help="The link profile.")
@click.option("--hosts", "host_text", default="1,2,4,8,16,32", show_default=True, help="Host counts of the curves.")
@click.option("--compute-s", type=float, default=None,
              help="Compute seconds per step on one process [the 1-host AllReduce run's median].")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="The PNG; JSON beside it.")
def main(workload: str, results: tuple[Path, ...], profile_name: str, host_text: str, compute_s: float | None,
         out: Path) -> None:
    measured, profiles = measured_rates(results)
    plans = link_planned(results, PLANS_DIR)
    ours = {hosts: configs for (w, p, hosts), configs in measured.items() if w == workload and p == profile_name}
    if not ours:
        raise click.UsageError(f"no run of {workload} on {profile_name} in the result files")
    item = capture_graph(WORKLOADS_DIR / f"{workload}.py", ["--steps", "2", "--warmup", "1"], 1, f"simulation-{workload}")
    if compute_s is None:
        one = [rate for c, rate in ours.get(1, {}).items() if c.system == "AllReduce" and not c.options]
        if not one:
            raise click.UsageError(f"no 1-host AllReduce run of {workload} to take the compute time from: give --compute-s")
        compute_s = item.batch_size / one[0]
    cpus = machine_cpus(results)
    link = profiles[profile_name]
    analytical = FitResult(Coefficients.analytical(), 0, 0, None, None)
    sample = cluster_spec(2)
    prof = model_profile(workload, item, 2, compute_s)
    facts = PlanningFacts(spec=sample, graph=item, profile=prof, network=network_facts(link, sample), fit=analytical)
    section = scaling_section(facts, Auto(), parse_host_counts(host_text))
    testbed: dict[str, dict[int, float]] = {}
    points: dict[str, dict[int, float]] = {}
    for hosts, configs in sorted(ours.items()):
        spec = cluster_spec(hosts)
        net = network_facts(link, spec, cpus)
        hosted = model_profile(workload, item, hosts, compute_s)
        for config, rate in configs.items():
            plan = plans.get(((workload, profile_name, hosts), config.system))
            if plan is None and config.system not in LINK_PLANNED:
                plan = build_strategy(config.system, item, spec, dict(config.options))
            if plan is None:
                continue
            testbed.setdefault(config.label, {})[hosts] = predict(plan, hosted, spec, net).examples_per_s
            points.setdefault(config.label, {})[hosts] = rate
    data = {"workload": workload, "profile": profile_name, "compute_s": compute_s, "machine_cpus": cpus,
            "curves": section.model_dump(mode="json"), "testbed_predicted": testbed, "measured": points}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    _plot(section.model_dump(mode="json"), testbed, points, out, f"{workload}, {link.rate_mbit:g} Mbit/s per host")
    click.echo(f"simulation-plot: wrote {out} and {out.with_suffix('.json')}")


def _plot(section: dict, testbed: dict[str, dict[int, float]], measured: dict[str, dict[int, float]], out: Path,
          title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, notes) = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [3, 2]})
    colors = {}
    for curve in section["curves"]:
        pts = [p for p in curve["points"] if p["examples_per_s"]]
        auto = curve["builder"] == AUTO
        line, = ax.plot([p["hosts"] for p in pts], [p["examples_per_s"] for p in pts], marker=".",
                        linewidth=3 if auto else 1.2, color="black" if auto else None, label=curve["builder"])
        colors[curve["builder"]] = line.get_color()
    for label, by_hosts in testbed.items():
        hosts = sorted(by_hosts)
        ax.scatter(hosts, [by_hosts[h] for h in hosts], marker="o", facecolors="none", s=70,
                   edgecolors=colors.get(label, "grey"), zorder=4)
    for label, by_hosts in measured.items():
        hosts = sorted(by_hosts)
        ax.scatter(hosts, [by_hosts[h] for h in hosts], marker="x", s=70, color=colors.get(label, "grey"), zorder=5)
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="grey", label="predicted, namespaces on one machine")
    ax.scatter([], [], marker="x", color="grey", label="measured (median)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(section["host_counts"], [str(h) for h in section["host_counts"]])
    ax.set_xlabel("hosts (1 worker + 1 PS each)")
    ax.set_ylabel("examples/s (cluster)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    notes.axis("off")
    text = ["Lines: `adrun profile --hosts`, every host its own machine, the profile's link between every "
            "pair (analytical coefficients). Circles: the same model for the benchmark's hosts, namespaces "
            "sharing one machine's CPUs. Crosses: measured.", "",
            "Published anchors (other hardware: GPUs, 25-100 Gbit/s):", *(f"- {a}" for a in ANCHORS)]
    wrapped = "\n".join(line for t in text for line in (textwrap.wrap(t, 62, subsequent_indent="  ") or [""]))
    notes.text(0, 1, wrapped, va="top", fontsize=8, family="monospace")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
