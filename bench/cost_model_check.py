"""How well the cost model ranks and times the builders, against the benchmark cluster's measurements.

    .venv/bin/python -m bench.cost_model_check bench/results/cluster.json bench/results/cluster-ncf-4h.json

For every (workload, link profile, host count) of the given result files, each adrun configuration
that ran is planned again (same builder and options on the same cluster shape: hosts of 1 worker +
1 PS) and predicted by strategies/cost_model.py. A plan made from the link (Auto's, by the cost
model of its day) is not planned again but read from `--plans` (the document the run used), so the
check judges the plan that was measured. A group measured in several result files is taken
from the last of them given (a re-measurement replaces the earlier runs of that group whole).
Reported per group: Kendall's tau (tau-b) between predicted and measured examples/s, and the mean
relative error of the predicted step time, with the analytical coefficients; when the same cluster
(profile, hosts) has other workloads, with coefficients fitted on those (leave one workload out)
and fitted on all of them (in-sample); when the same link profile was measured at other host
counts, with coefficients fitted on those (leave one host count out).

The model's inputs are built the way `adrun profile` builds them, from the benchmark's own facts:
- the graph: captured from the workload script (adrun's capture, one process);
- rows touched per step: the mean distinct ids of the workers' real batches, in all and per
  sixteenth of the rows (bench/cluster/touched_rows.py); a group measured before the runtime
  pooled lookups on the PS (`POOLED_SINCE`) without the graph's pooled facts, its rows having
  crossed;
- compute time per step, per group: the 1-host AllReduce run of the group's own result file (one
  worker, nothing synchronized: the step is the compute, measured interleaved with the group's runs,
  under their load), else that of the file `--compute-from FILE=ONE_HOST_FILE` names for it (a
  1-host run measured beside it, in the invocation before or after: a group of many hosts and a
  1-host group whose runs need timed windows of seconds each do not fit one lock hold), else
  `--compute-s workload=seconds`, else a short plain run of the script measured here (the
  machine's load makes it noisy);
- network: the profile's shaped rate and token bucket in TCP payload bytes, its added delay,
  between hosts; inside a host (loopback) 2 GB/s, what TF's tensor transfers between a worker and a
  PS task cost on this machine (`LOCAL`), and 0.13 ms per message, measured; the hosts as namespaces sharing the
  machine's CPUs (the results' `machine.cpus`).
Writes JSON (`--out`) and a short markdown (`--markdown`).
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import click
import numpy as np
from scipy.stats import kendalltau

from adrun.capture_run import capture_graph
from adrun.graph_item import GraphItem
from adrun.profile.scaling import scaled_network, scaled_spec
from adrun.spec import ClusterSpec, Node
from adrun.strategies import BUILDERS, build_strategy
from adrun.strategies.auto import TIE_MARGIN, Auto
from adrun.strategies.cost_model import Coefficients, predict
from adrun.strategies.document import AllReduceSync, Partition, Strategy, load_strategy
from adrun.strategies.facts import Link, ModelProfile, NetworkFacts, RowsTouched, TrialRecord
from adrun.strategies.fit import FitResult, fit
from adrun.strategies.planning_facts import PlanningFacts
from tests.cluster.netns import bucket_bytes, queue_bytes

from .cluster.analysis import Summary, summarize
from .cluster.results import BenchResults, Profile, RunConfig
from .cluster.tf2 import script_args
from .cluster.touched_rows import distinct_rows
from .paths import BENCH, PLANS_DIR, REPO, RESULTS_DIR, WORKLOADS_DIR

# The host's local path (worker <-> PS task over loopback): a one-worker step whose 16 MB variable
# lives on the PS, read and its gradient pushed back (33 MB a step), took 15.4-16.4 ms of CPU (worker
# and PS task, one after the other on the step's path) beyond the same step with an 8 x 8 variable:
# about 2.1 GB/s (`python -m bench.loopback_ps_step --wide-rows 4096`, bench/results/
# loopback-ps-step-16mb.json), rounded to one digit. Its latency: a step of K dependent messages
# between the worker and the PS task (`--hops`, bench/results/loopback-hops.json) takes 0.23 ms more
# per message (0.14-0.34 by round), the hand-off between the two processes included; the model adds
# its per-message cost (Coefficients.message_latency_s, 0.1 ms) to a path's latency, so 0.13 ms.
LOCAL = Link(bytes_per_s=2e9, latency_s=1.3e-4, source="measured")
MEASURE_STEPS, MEASURE_WARMUP = 40, 10
SLICES = 16  # slices of a sparse variable's rows whose touched rows are counted (RowsTouched.by_range)

Group = tuple[str, str, int]  # (workload, profile, hosts)
LINK_PLANNED = ("Auto",)  # builders whose plan depends on the link: read from --plans, not replanned
# PS and PSLoadBalancing cut a large dense variable into chunks since this commit (strategies/ps.py,
# runtime/kernels/ps_prefetch.py); their runs measured at a commit without it ran it whole
CHUNKS_SINCE = "efc32b4"
CHUNKING_BUILDERS = ("PS", "PSLoadBalancing")
# The runtime pools a PS-held table's lookups over their bags since this commit (per-example sums
# instead of rows, runtime/kernels/pooled_bags.py). A group measured before it is predicted from
# its graph without the pooled facts capture now records (`without_pooled`): its rows went over the
# wire.
POOLED_SINCE = "913b05e"


def cluster_spec(hosts: int) -> ClusterSpec:
    """The benchmark's cluster shape: each host 1 worker + 1 PS, the first the chief; made as
    `adrun profile --hosts` makes the clusters it simulates, from a sample of two such hosts."""
    sample = ClusterSpec(version=1, nodes=[Node(address=f"10.0.0.{i + 1}", chief=i == 0, workers=1, ps=1)
                                           for i in range(2)])
    return scaled_spec(sample, hosts)


# TCP payload of one full frame as the shaper counts it: tc's token bucket on a veth counts the
# Ethernet frame without preamble and check sum, 1514 bytes at an MTU of 1500, of which 1448 carry
# data (20 bytes of IP header, 32 of TCP header with timestamps, 14 of Ethernet header)
PAYLOAD_SHARE = 1448 / 1514


def network_facts(profile: Profile, spec: ClusterSpec, shared_cpus: int | None = None) -> NetworkFacts:
    """The profile's shaping as the links' facts: its rate, token bucket and queue in payload bytes
    (`PAYLOAD_SHARE` of the frames the shaper counts), its added delay, given to every pair of
    `spec`'s hosts as `adrun profile --hosts` does (adrun/profile/scaling.py); with `shared_cpus`,
    the hosts as what they are on the benchmark, namespaces of one machine with that many CPUs."""
    link = Link(bytes_per_s=profile.rate_mbit * 1e6 / 8 * PAYLOAD_SHARE, latency_s=profile.delay_ms / 1000,
                burst_bytes=bucket_bytes(profile.rate_mbit) * PAYLOAD_SHARE,
                queue_bytes=queue_bytes(profile.rate_mbit) * PAYLOAD_SHARE, source="spec")
    return scaled_network(NetworkFacts(local=LOCAL, shared_cpus=shared_cpus), link, spec)


def machine_cpus(results: Sequence[Path]) -> int:
    """The CPUs of the machine the result files were measured on (one machine: a UsageError if
    they disagree)."""
    cpus = {int(bench.machine["cpus"]) for _, bench in _runs(results)}
    if len(cpus) != 1:
        raise click.UsageError(f"the result files were measured on machines of {sorted(cpus)} CPUs: check one machine's")
    return cpus.pop()


def measured_compute_s(workload: str) -> float:
    """Seconds per step of a short plain run of the workload script (no adrun, one process)."""
    with tempfile.TemporaryDirectory(prefix="cost-model-check-") as tmp:
        out = Path(tmp) / "w.json"
        script, *args = script_args(workload)
        subprocess.run([sys.executable, str(WORKLOADS_DIR / script), *args, "--steps", str(MEASURE_STEPS),
                        "--warmup", str(MEASURE_WARMUP), "--result-file", str(out)],
                       cwd=WORKLOADS_DIR, check=True, capture_output=True)
        return 1 / json.loads(out.read_text())["steps_per_s"]


def model_profile(workload: str, item: GraphItem, hosts: int, compute_s: float) -> ModelProfile:
    """The workload's profile as the cost model sees it: per sparse variable, the mean over the
    workers' batches of its distinct ids, in all and in each of SLICES equal slices of its rows."""
    whole = build_strategy("AllReduce", item, cluster_spec(hosts))
    sliced = whole.model_copy(update={"variables": [
        v.model_copy(update={"sync": None, "partition": Partition(axis=0, shards=[AllReduceSync(group=0)] * SLICES)})
        if v.grad == "sparse" and v.shape[0] >= SLICES else v
        for v in whole.variables]})
    by_slice = distinct_rows(WORKLOADS_DIR, workload, sliced)
    rows = {}
    for name, counts in distinct_rows(WORKLOADS_DIR, workload, whole).items():
        slices = [by_slice.get(f"{name}/part_{i}") for i in range(SLICES)]
        rows[name] = RowsTouched(mean=statistics.mean(counts), max=max(counts),
                                 by_range=[statistics.mean(c) for c in slices] if all(slices) else [])
    return ModelProfile(graph=item, compute_s=compute_s, steps_measured=MEASURE_STEPS - MEASURE_WARMUP,
                        rows_touched=rows)


def _decisions(plan: Strategy) -> list[dict]:
    """What a plan decides per variable (not its notes)."""
    return [v.model_dump(exclude={"note"}) for v in plan.variables]


def tau(predicted: list[float], measured: list[float]) -> float | None:
    if len(predicted) < 2:
        return None
    value = kendalltau(predicted, measured).statistic
    return None if np.isnan(value) else float(value)


def mean_error(predicted_step: list[float], measured_step: list[float]) -> float:
    return float(np.mean(np.abs(np.array(predicted_step) / np.array(measured_step) - 1)))


@click.command(help=__doc__.split("\n\n")[0])
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--compute-s", "compute_given", multiple=True, metavar="WORKLOAD=SECONDS",
              help="compute time per step of a workload on one process, for the groups whose result file has no "
                   "1-host AllReduce run (else measured here)")
@click.option("--compute-from", "compute_from", multiple=True, metavar="FILE=ONE_HOST_FILE",
              help="the groups of results FILE take their compute time from ONE_HOST_FILE's 1-host AllReduce run "
                   "when FILE has none (both among the results; repeatable)")
@click.option("--plans", "plans_dir", type=click.Path(file_okay=False, path_type=Path), default=PLANS_DIR, show_default=True,
              help="the strategy documents the runs of link-planned builders (Auto) used: "
                   "PLANS/<results file's stem>/WORKLOAD-HOSTS-PROFILE-Auto.yml, as bench/cluster/launch.py names them")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS_DIR / "cost-model-check.json",
              show_default=True)
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=BENCH / "COST-MODEL-CHECK.md",
              show_default=True)
def main(results: tuple[Path, ...], compute_given: tuple[str, ...], compute_from: tuple[str, ...], plans_dir: Path,
         out: Path, markdown: Path) -> None:
    measured, profiles = measured_rates(results)
    cpus = machine_cpus(results)
    plans = link_planned(results, plans_dir)
    repeatability = repetition_tau(results)
    given = {w: float(s) for w, s in (item.split("=", 1) for item in compute_given)}
    one_host = one_host_rates(results)
    sources = group_sources(results)
    companions = companion_files(results, compute_from)
    items: dict[str, GraphItem] = {}
    plain: dict[str, float] = {}
    compute: dict[str, float] = {}
    compute_source: dict[str, str] = {}
    model_profiles: dict[Group, ModelProfile] = {}
    unpooled = measured_before_pooling(results)
    for group in sorted(measured):
        workload, _, hosts = group
        if workload not in items:
            click.echo(f"cost-model-check: capturing {workload}")
            script, *args = script_args(workload)  # a Keras workload: keras_fit.py --model M, captured in TF2 mode
            items[workload] = capture_graph(WORKLOADS_DIR / script, [*args, "--steps", "2", "--warmup", "1"], 1,
                                            f"cost-model-check-{workload}")
        own = sources[group] if (sources[group], workload) in one_host else companions.get(sources[group])
        rate = one_host.get((own, workload)) if own is not None else None
        if rate is not None:  # one worker: nothing is synchronized, the step is the compute
            seconds, source = items[workload].batch_size / rate, f"the 1-host run of {own.name}"
        elif workload in given:
            seconds, source = given[workload], "given"
        else:
            if workload not in plain:
                click.echo(f"cost-model-check: measuring {workload}'s compute time ({MEASURE_STEPS} plain steps)")
                plain[workload] = measured_compute_s(workload)
            seconds, source = plain[workload], "measured here"
        label = " ".join(str(part) for part in group)
        compute[label], compute_source[label] = seconds, source
        item = without_pooled(items[workload]) if group in unpooled else items[workload]
        model_profiles[group] = model_profile(workload, item, hosts, seconds)
    report = {"inputs": [str(p) for p in results], "compute_s": compute, "compute_source": compute_source,
              "group_sources": {" ".join(str(part) for part in group): {"file": str(path), "replaces": [
                  str(p) for p in replaced]} for group, (path, replaced) in sorted(group_history(results).items())},
              "local_path": LOCAL.model_dump(),
              "machine_cpus": cpus,
              "groups": check(measured, profiles, model_profiles, repeatability, plans, cpus,
                              measured_ranges(results), measured_before_chunks(results))}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    markdown.write_text(render(report, out))
    click.echo(f"cost-model-check: wrote {out} and {markdown}")


def measured_before_chunks(results: Sequence[Path]) -> set[Group]:
    """The groups whose runs (from their source file, `group_sources`) were measured at a commit
    that does not contain CHUNKS_SINCE: their PS and PSLoadBalancing ran whole variables, and are
    planned again with `chunk_bytes=0`, the plan that ran. A commit git does not know is a
    UsageError naming the file."""
    return measured_before(results, CHUNKS_SINCE, "its PS runs had chunks")


def measured_before_pooling(results: Sequence[Path]) -> set[Group]:
    """The groups measured before the runtime pooled lookups (POOLED_SINCE): predicted without the
    graph's pooled facts (`without_pooled`)."""
    return measured_before(results, POOLED_SINCE, "its PS runs pooled lookups")


def measured_before(results: Sequence[Path], since: str, what: str) -> set[Group]:
    """The groups whose source file (`group_sources`) was measured at a commit that does not
    contain `since`; a commit git does not know is a UsageError naming the file and `what` could
    not be told."""
    commits = {path: bench.versions.get("commit") for path, bench in _runs(results)}
    before = {}
    for path, commit in commits.items():
        answer = subprocess.run(["git", "-C", str(REPO), "merge-base", "--is-ancestor", since, str(commit)],
                                capture_output=True, text=True)
        if answer.returncode not in (0, 1):
            raise click.UsageError(f"{path}: measured at commit {commit}, which git does not know here "
                                   f"({answer.stderr.strip()}): cannot tell whether {what}")
        before[path] = answer.returncode == 1
    return {group for group, path in group_sources(results).items() if before[path]}


def without_pooled(graph: GraphItem) -> GraphItem:
    """`graph` as captured before capture recorded pooled lookups (VariableInfo.pooled): the cost
    model then counts their tables' rows, as the runtime moved them before pooling."""
    return graph.model_copy(update={"variables": [v.model_copy(update={"pooled": None}) for v in graph.variables]})


def one_host_rates(results: Sequence[Path]) -> dict[tuple[Path, str], float]:
    """{(result file, workload): median examples/s of its 1-host AllReduce runs}: the compute time of
    the groups of that file, measured under the load their runs had (interleaved with them)."""
    return {(path, summary.config.workload): summary.median for path, bench in _runs(results)
            for summary in summarize(bench)
            if summary.config.kind == "adrun" and summary.config.hosts == 1 and summary.median
            and summary.config.system == "AllReduce" and not summary.config.options}


def companion_files(results: Sequence[Path], pairs: Sequence[str]) -> dict[Path, Path]:
    """{results file: the file whose 1-host AllReduce run gives its groups their compute time}, from
    `--compute-from FILE=ONE_HOST_FILE`, each named by its path or, when no other input has the same
    file name, by its name (`_input_named`)."""
    out = {}
    for pair in pairs:
        names = pair.split("=", 1)
        if len(names) != 2:
            raise click.UsageError(f"--compute-from {pair}: expected FILE=ONE_HOST_FILE, both among the results (no = not)")
        out[_input_named(results, names[0], pair)] = _input_named(results, names[1], pair)
    return out


def _input_named(results: Sequence[Path], name: str, pair: str) -> Path:
    """The one input that `name` names: the input at that path, else the one input of that file
    name. A name no input has, or a bare file name two inputs in different directories share, is a
    UsageError naming it (one of them would be taken for the other)."""
    at = [p for p in results if p.resolve() == Path(name).resolve()]
    found = at or [p for p in results if p.name == name]
    if not found:
        raise click.UsageError(f"--compute-from {pair}: expected FILE=ONE_HOST_FILE, both among the results "
                               f"({name} not)")
    if len(set(found)) > 1:
        raise click.UsageError(f"--compute-from {pair}: {name} names {len(found)} inputs "
                               f"({', '.join(map(str, found))}): give its path")
    return found[0]


def group_history(results: Sequence[Path]) -> dict[Group, tuple[Path, list[Path]]]:
    """{group: (the file its runs are taken from, `group_sources`; the earlier files that measured
    it too, whose runs of it the later file replaces)}: what the report states per group."""
    files: dict[Group, list[Path]] = defaultdict(list)
    for path, bench in _runs(results):
        for run in bench.runs:
            c = run.config
            group = (c.workload, c.profile, c.hosts)
            if c.kind == "adrun" and path not in files[group]:
                files[group].append(path)
    return {group: (paths[-1], paths[:-1]) for group, paths in files.items()}


def group_sources(results: Sequence[Path]) -> dict[Group, Path]:
    """The file each group's adrun runs are taken from: the last of `results` that measured it, so
    a group measured again (after a runtime change) replaces the earlier file's runs of it whole."""
    sources: dict[Group, Path] = {}
    for path, bench in _runs(results):
        for run in bench.runs:
            c = run.config
            if c.kind == "adrun":
                sources[c.workload, c.profile, c.hosts] = path
    return sources


def _runs(results: Sequence[Path]) -> Iterator[tuple[Path, BenchResults]]:
    for path in results:
        yield path, BenchResults.model_validate_json(path.read_text())


def measured_rates(results: Sequence[Path]) -> tuple[dict[Group, dict[RunConfig, float]], dict[str, Profile]]:
    """The median examples/s of every adrun configuration that ran, by group (from the group's
    source file, `group_sources`); the link profiles."""
    measured: dict[Group, dict[RunConfig, float]] = defaultdict(dict)
    profiles: dict[str, Profile] = {}
    for _, bench in _runs(results):
        profiles |= {p.name: p for p in bench.profiles}
    for group, summary in _summaries(results):
        measured[group][summary.config] = summary.median
    return measured, profiles


def measured_ranges(results: Sequence[Path]) -> dict[tuple[Group, str], tuple[float, float]]:
    """The lowest and highest examples/s of each configuration's repetitions, by (group, label)."""
    return {(group, summary.config.label): (summary.low, summary.high) for group, summary in _summaries(results)
            if summary.low is not None and summary.high is not None}


def _summaries(results: Sequence[Path]) -> Iterator[tuple[Group, Summary]]:
    """Every adrun configuration that ran, from its group's source file (`group_sources`)."""
    source = group_sources(results)
    for path, bench in _runs(results):
        for summary in summarize(bench):
            c = summary.config
            group = (c.workload, c.profile, c.hosts)
            if c.kind == "adrun" and summary.median and source[group] == path:
                yield group, summary


def link_planned(results: Sequence[Path], plans_dir: Path) -> dict[tuple[Group, str], Strategy]:
    """The strategy document each run of a link-planned builder used, by (group, builder), from
    `plans_dir/<results file's stem>/WORKLOAD-HOSTS-PROFILE-BUILDER.yml`, and each given plan's
    (a system that is no builder) from `.../WORKLOAD-HOSTS-LABEL.yml`. Such a plan was made by
    the cost model of the day of the run: planning it again with today's model would judge a plan
    nobody measured. A missing document is a UsageError naming it."""
    plans = {}
    source = group_sources(results)
    for results_path, bench in _runs(results):
        for run in bench.runs:
            c = run.config
            if c.kind != "adrun" or (c.system in BUILDERS and c.system not in LINK_PLANNED):
                continue
            if source[c.workload, c.profile, c.hosts] != results_path:
                continue
            # a given plan (`bench.cluster.run --plan LABEL=FILE`) is the same on every link
            name = (f"{c.workload}-{c.hosts}-{c.profile}-{c.system}.yml" if c.system in LINK_PLANNED
                    else f"{c.workload}-{c.hosts}-{c.system}.yml")
            path = plans_dir / results_path.stem / name
            if not path.is_file():
                raise click.UsageError(f"{path}: no strategy document for the {c.system} runs of {c.workload}, "
                                       f"{c.profile}, {c.hosts} hosts in {results_path} (copy the one the "
                                       "benchmark ran there)")
            plans[(c.workload, c.profile, c.hosts), c.system] = load_strategy(path)
    return plans


def repetition_tau(results: Sequence[Path]) -> dict[Group, float]:
    """Per group, the mean Kendall tau between the adrun configurations' examples/s in two
    repetitions, over every pair of repetitions in which all of them ran: how well the measurement
    ranks the builders against itself, the most any model can be expected to agree with it."""
    rates: dict[Group, dict[RunConfig, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    source = group_sources(results)
    for path, bench in _runs(results):
        for run in bench.runs:
            c = run.config
            if c.kind == "adrun" and run.examples_per_s is not None and source[c.workload, c.profile, c.hosts] == path:
                rates[c.workload, c.profile, c.hosts][c][run.repetition] = run.examples_per_s
    out = {}
    for group, by_config in rates.items():
        reps = sorted(set.intersection(*(set(r) for r in by_config.values())))
        taus = [tau([r[a] for r in by_config.values()], [r[b] for r in by_config.values()])
                for a, b in itertools.combinations(reps, 2)]
        if taus and None not in taus:
            out[group] = float(np.mean(taus))
    return out


def check(measured: dict[Group, dict[RunConfig, float]], profiles: dict[str, Profile],
          model_profiles: dict[Group, ModelProfile],
          repeatability: dict[Group, float] | None = None,
          plans: dict[tuple[Group, str], Strategy] | None = None, shared_cpus: int | None = None,
          ranges: dict[tuple[Group, str], tuple[float, float]] | None = None,
          before_chunks: set[Group] | None = None) -> list[dict]:
    """Per group: the predictions of every configuration with the analytical coefficients; when the
    cluster (profile, hosts) has records of other workloads, fitted without this workload's (leave
    one workload out) and with all (in-sample); when the profile has records at other host counts,
    fitted on those (leave one host count out, the records taken as one cluster). Kendall tau and
    mean relative error of each, beside the tau between repetitions of the measurement
    (`repetition_tau`) when given. A configuration of a link-planned builder (Auto) is predicted for
    the plan it ran, from `plans`. `shared_cpus`: the CPUs of the one machine all hosts ran on
    (NetworkFacts.shared_cpus), None to predict them as separate machines. `ranges`: each
    configuration's lowest and highest examples/s over its repetitions, kept beside its median.
    `before_chunks`: the groups measured before PS chunks (`measured_before_chunks`), whose PS and
    PSLoadBalancing are planned with `chunk_bytes=0` unless the run gave it."""
    records: dict[tuple[str, int], list[TrialRecord]] = defaultdict(list)
    rows: dict[Group, list[tuple[str, Strategy, float, float]]] = {}  # label, plan, examples/s, step s
    for (workload, profile, hosts), configs in sorted(measured.items()):
        spec, prof = cluster_spec(hosts), model_profiles[workload, profile, hosts]
        rows[workload, profile, hosts] = []
        for config, rate in sorted(configs.items(), key=lambda kv: -kv[1]):
            group = (workload, profile, hosts)
            options = dict(config.options)
            if group in (before_chunks or set()) and config.system in CHUNKING_BUILDERS:
                options.setdefault("chunk_bytes", "0")
            strategy = (plans or {}).get((group, config.system)) or build_strategy(
                config.system, prof.graph, spec, options)
            steps_per_s = rate / (prof.graph.batch_size * spec.num_workers)
            records[profile, hosts].append(TrialRecord(
                recorded_at="bench", cluster_key=f"{profile}-{hosts}h", workload=workload, spec=spec,
                strategy=strategy, profile=prof, network=network_facts(profiles[profile], spec, shared_cpus),
                steps_per_s=steps_per_s))
            rows[workload, profile, hosts].append((config.label, strategy, rate, 1 / steps_per_s))
    groups = []
    for (workload, profile, hosts), group_rows in rows.items():
        spec, prof = cluster_spec(hosts), model_profiles[workload, profile, hosts]
        net = network_facts(profiles[profile], spec, shared_cpus)
        others = [r for r in records[profile, hosts] if r.workload != workload]
        variants: dict[str, tuple[Coefficients, int]] = {"analytical": (Coefficients.analytical(), 0)}
        if others:
            for name, fitted in (("leave-one-workload-out", fit(others)), ("in-sample", fit(records[profile, hosts]))):
                variants[name] = (fitted.coefficients, fitted.records_used)
        other_hosts = [r.model_copy(update={"cluster_key": profile})
                       for (p, h), rs in records.items() if p == profile and h != hosts for r in rs]
        if other_hosts:
            fitted = fit(other_hosts)
            variants["leave-one-host-count-out"] = (fitted.coefficients, fitted.records_used)
        measured_step = [step for _, _, _, step in group_rows]
        models = {}
        for name, (coefficients, used) in variants.items():
            preds = [predict(plan, prof, spec, net, coefficients) for _, plan, _, _ in group_rows]
            auto = Auto().build(PlanningFacts(spec=spec, graph=prof.graph, profile=prof, network=net,
                                              fit=FitResult(coefficients, used, 0, None, None)))
            same = [label for label, plan, _, _ in group_rows if _decisions(plan) == _decisions(auto)]
            models[name] = {
                "auto": {"predicted_examples_per_s": predict(auto, prof, spec, net, coefficients).examples_per_s,
                         "same_plan_as": same, "notes": {v.name: v.note for v in auto.variables}},
                "coefficients": coefficients.model_dump(), "records": used,
                "kendall_tau": tau([1 / p.step_s for p in preds], [1 / step for step in measured_step]),
                "mean_relative_error": mean_error([p.step_s for p in preds], measured_step),
                "systems": [{"system": label, "measured_examples_per_s": rate,
                             "measured_range_examples_per_s": (ranges or {}).get(((workload, profile, hosts), label)),
                             "predicted_examples_per_s": p.examples_per_s, "predicted_step_s": p.step_s,
                             "measured_step_s": step, "bound": p.bound}
                            for (label, _, rate, step), p in zip(group_rows, preds, strict=True)],
            }
        groups.append({"workload": workload, "profile": profile, "hosts": hosts, "compute_s": prof.compute_s,
                       "repetition_tau": (repeatability or {}).get((workload, profile, hosts)),
                       "rows_touched": {k: v.model_dump() for k, v in prof.rows_touched.items()}, "models": models})
    return groups


def render(report: dict, out: Path) -> str:
    lines = ["# Cost model against the benchmark cluster", "",
             f"Generated by `bench/cost_model_check.py` from {', '.join(f'`{p}`' for p in report['inputs'])}; "
             f"data in `{out.name}`.", "",
             *_sources(report.get("group_sources", {})),
             "Kendall's tau (tau-b) between predicted and measured examples/s across the adrun builders of "
             "each group, and the mean relative error of the predicted step time. Compute time per step "
             "used, per group: " + ", ".join(f"{g} {s * 1000:.1f} ms ({report.get('compute_source', {}).get(g, 'given')})"
                                             for g, s in report["compute_s"].items())
             + f"; loopback {report['local_path']['bytes_per_s'] / 1e9:.0f} GB/s (measured: bench/loopback_ps_step.py) "
             f"and {report['local_path']['latency_s'] * 1e6:.0f} µs (measured: `--hops`).", "",
             "The last column is the tau between two repetitions of the measurement itself (mean over "
             "pairs of repetitions): how far the measured order holds from one repetition to the next.", "",
             "| workload | profile | hosts | builders | coefficients | records | Kendall tau | mean rel. error "
             "| tau between repetitions |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in report["groups"]:
        for name, m in g["models"].items():
            lines.append(f"| {g['workload']} | {g['profile']} | {g['hosts']} | {len(m['systems'])} | {name} | "
                         f"{m['records']} | {_two(m['kendall_tau'])} | {m['mean_relative_error']:.0%} "
                         f"| {_two(g.get('repetition_tau'))} |")
    lines += _means(report["groups"])
    lines += _host_count_means(report["groups"])
    lines += _per_builder(report["groups"])
    lines += _auto_table(report["groups"])
    lines += _losses_table(report["groups"])
    for g in report["groups"]:
        auto = g["models"]["analytical"]["auto"]
        same = f"the same plan as {', '.join(auto['same_plan_as'])}" if auto["same_plan_as"] else "a plan no builder made"
        lines += ["", f"## {g['workload']}, {g['profile']}, {g['hosts']} hosts (analytical)", "",
                  f"Auto (analytical): {auto['predicted_examples_per_s']:,.0f} examples/s predicted, {same}.", "",
                  "| system | measured examples/s | predicted examples/s | step ms measured / predicted | bound |",
                  "|---|---|---|---|---|"]
        for s in g["models"]["analytical"]["systems"]:
            lines.append(f"| {s['system']} | {s['measured_examples_per_s']:,.0f} | {s['predicted_examples_per_s']:,.0f} | "
                         f"{s['measured_step_s'] * 1000:.0f} / {s['predicted_step_s'] * 1000:.0f} | {s['bound']} |")
    return "\n".join(lines) + "\n"


def _sources(sources: dict[str, dict]) -> list[str]:
    """Which file each group measured more than once is taken from: the newest input, whose runs of
    the group replace the earlier files' whole."""
    again = {g: s for g, s in sources.items() if s["replaces"]}
    if not again:
        return []
    return ["Each group is taken from the last input that measured it; its runs there replace the earlier "
            "files' runs of that group whole. Groups measured more than once: "
            + "; ".join(f"{g} from `{Path(s['file']).name}` (replaces "
                        f"{', '.join(f'`{Path(r).name}`' for r in s['replaces'])})" for g, s in again.items())
            + ".", ""]


def _two(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _means(groups: list[dict]) -> list[str]:
    """Means over the groups that have every kind of coefficients (those of clusters with several
    workloads), one table per host count: the figures the goals are stated in."""
    kinds = ("analytical", "leave-one-workload-out", "in-sample")
    full = [g for g in groups if all(k in g["models"] for k in kinds)]
    lines = []
    for hosts in sorted({g["hosts"] for g in full}):
        some = [g for g in full if g["hosts"] == hosts]
        names = ", ".join(f"{g['workload']} {g['profile']}" for g in some)
        lines += ["", f"Means over the {len(some)} groups of {hosts} hosts ({names}):", "",
                  "| coefficients | mean Kendall tau | mean rel. error | mean tau between repetitions |",
                  "|---|---|---|---|"]
        reps = [g["repetition_tau"] for g in some if g.get("repetition_tau") is not None]
        for k in kinds:
            taus = [g["models"][k]["kendall_tau"] for g in some if g["models"][k]["kendall_tau"] is not None]
            lines.append(f"| {k} | {_two(float(np.mean(taus)) if taus else None)} | "
                         f"{np.mean([g['models'][k]['mean_relative_error'] for g in some]):.0%} | "
                         f"{_two(float(np.mean(reps)) if reps else None)} |")
    return lines


SIMULATION_GOAL = 0.20  # issue 21: predicted step time within 20 % of measured, every builder and host count


def builder_errors(groups: list[dict]) -> dict[tuple[str, str, str], dict[int, tuple[float, float]]]:
    """{(workload, profile, builder label): {hosts: (measured, predicted) step seconds}}, with
    the analytical coefficients: the figures `adrun profile --hosts` would have predicted."""
    out: dict[tuple[str, str, str], dict[int, tuple[float, float]]] = defaultdict(dict)
    for g in groups:
        for s in g["models"]["analytical"]["systems"]:
            out[g["workload"], g["profile"], s["system"]][g["hosts"]] = (s["measured_step_s"], s["predicted_step_s"])
    return out


def _per_builder(groups: list[dict]) -> list[str]:
    """The simulation's error per builder and host count (analytical coefficients), how many
    figures meet the goal, and how many lie inside the range of the measured repetitions."""
    errors = builder_errors(groups)
    ranges = {(g["workload"], g["profile"], s["system"], g["hosts"]): s.get("measured_range_examples_per_s")
              for g in groups for s in g["models"]["analytical"]["systems"]}
    rates = {(g["workload"], g["profile"], s["system"], g["hosts"]): (s["measured_examples_per_s"],
                                                                     s["predicted_examples_per_s"])
             for g in groups for s in g["models"]["analytical"]["systems"]}
    counts = sorted({h for by_hosts in errors.values() for h in by_hosts})
    lines = ["", "## Simulation: error of the predicted step time per builder (analytical coefficients)", "",
             "The clusters are made as `adrun profile --hosts` makes them (adrun/profile/scaling.py: a sample "
             "host repeated, the profile's link between every pair), as namespaces sharing the machine's CPUs. "
             "Each cell: predicted / measured (median) step time - 1, then in brackets the spread of the "
             "measured repetitions ((max - min) / median of examples/s); ✗ outside 20 %, ◦ outside 20 % "
             f"but inside the measured min–max. Goal: within {SIMULATION_GOAL:.0%}.", "",
             "| workload | profile | builder | " + " | ".join(f"{h} host(s)" for h in counts) + " |",
             "|---|---|---|" + "---|" * len(counts)]
    met = total = inside = 0
    for (workload, profile, system), by_hosts in sorted(errors.items()):
        cells = []
        for h in counts:
            if h not in by_hosts:
                cells.append("-")
                continue
            measured, predicted = by_hosts[h]
            error = predicted / measured - 1
            span = ranges.get((workload, profile, system, h))
            median, predicted_rate = rates[workload, profile, system, h]
            within = span is not None and predicted_rate is not None and span[0] <= predicted_rate <= span[1]
            total += 1
            met += abs(error) <= SIMULATION_GOAL
            inside += abs(error) <= SIMULATION_GOAL or within
            mark = "" if abs(error) <= SIMULATION_GOAL else (" ◦" if within else " ✗")
            spread = f" ({(span[1] - span[0]) / median:.0%})" if span else ""
            cells.append(f"{round(error, 6) + 0.0:+.0%}{spread}{mark}")  # float noise around 0 shows as +0%, not -0%
        lines.append(f"| {workload} | {profile} | {system} | " + " | ".join(cells) + " |")
    lines += ["", f"Within {SIMULATION_GOAL:.0%}: **{met} of {total}** (builder, group) figures; within "
              f"{SIMULATION_GOAL:.0%} or inside the measured min–max: {inside} of {total}.", "",
              "The same count with fitted coefficients, where the group has them (held out: fitted without "
              "the group's workload, or without its host count; in-sample: fitted with it):", "",
              "| coefficients | within 20 % | mean abs. error |", "|---|---|---|"]
    for kind in ("analytical", "leave-one-workload-out", "leave-one-host-count-out", "in-sample"):
        errs = [s["predicted_step_s"] / s["measured_step_s"] - 1
                for g in groups if kind in g["models"] for s in g["models"][kind]["systems"]]
        if errs:
            inside = sum(abs(e) <= SIMULATION_GOAL for e in errs)
            lines.append(f"| {kind} | {inside} of {len(errs)} | {np.mean(np.abs(errs)):.0%} |")
    return lines


AUTO_GOAL = 0.95  # issue 21: Auto's examples/s at least 0.95x the best built-in builder's, every group


def _auto_table(groups: list[dict]) -> list[str]:
    """Auto's plan with today's analytical model on every measured group: which measured builder,
    or given plan (`bench.cluster.run --plan`), made the same plan (then its measured rate is
    Auto's), else Auto's own runs when the group measured them (its plan made on the shaped link
    at run time), against the best built-in builder measured there."""
    lines = ["", "## Auto with this model on every measured group (analytical coefficients)", "",
             "Auto planned again on each group's cluster. When its plan is a measured builder's or a given "
             "plan's (same synchronizer and group for every variable), that one's median is Auto's measured rate; "
             f"goal: at least {AUTO_GOAL:.2f}x the best built-in builder measured there.", "",
             "| workload | profile | hosts | Auto's plan | best built-in (measured examples/s) | Auto / best |",
             "|---|---|---|---|---|---|"]
    met = judged = 0
    for g in groups:
        model = g["models"]["analytical"]
        builtin = [s for s in model["systems"] if s["system"] in BUILDERS and s["system"] not in LINK_PLANNED]
        if not builtin:
            continue
        best = max(builtin, key=lambda s: s["measured_examples_per_s"])
        same = [s for s in model["systems"]
                if s["system"] in model["auto"]["same_plan_as"] and s["system"] not in LINK_PLANNED]
        ran = [s for s in model["systems"] if s["system"] in LINK_PLANNED]
        if same or ran:
            measured = (same or ran)[0]
            ratio = measured["measured_examples_per_s"] / best["measured_examples_per_s"]
            judged += 1
            met += ratio >= AUTO_GOAL
            plan = f"{measured['system']}'s" if same else "its own, as run (made on the shaped link)"
            cell = f"{ratio:.2f}" + ("" if ratio >= AUTO_GOAL else " ✗")
        else:
            plan, cell = "a plan no measured builder made", "not measured"
        lines.append(f"| {g['workload']} | {g['profile']} | {g['hosts']} | {plan} | {best['system']} "
                     f"({best['measured_examples_per_s']:,.0f}) | {cell} |")
    lines += ["", f"At least {AUTO_GOAL:.2f}x: **{met} of {judged}** groups whose Auto plan a builder or a given "
                  "plan made or whose Auto was measured."]
    return lines


def predicted_leads_lost(groups: list[dict]) -> list[tuple[float, float, dict, str, str]]:
    """Every pair of measured systems of one group where the analytical model predicted the first
    faster and it measured slower: (predicted lead: the other's predicted step over its own, less 1;
    measured examples/s of the first over the other's; group; first; other), largest lead first.
    How far apart the model's errors on plans of one cluster are: Auto's TIE_MARGIN must exceed
    the largest lead, or Auto would have left a plan that measured faster (strategies/auto.py)."""
    lost = []
    for g in groups:
        systems = g["models"]["analytical"]["systems"]
        for a, b in itertools.permutations(systems, 2):
            if (a["predicted_step_s"] < b["predicted_step_s"]
                    and a["measured_examples_per_s"] < b["measured_examples_per_s"]):
                lost.append((b["predicted_step_s"] / a["predicted_step_s"] - 1,
                             a["measured_examples_per_s"] / b["measured_examples_per_s"], g, a["system"], b["system"]))
    return sorted(lost, key=lambda row: -row[0])


def _losses_table(groups: list[dict]) -> list[str]:
    """The predicted leads that measured as losses, against Auto's tie margin."""
    lost = predicted_leads_lost(groups)
    lines = ["", "## Predicted leads that measured as losses (analytical coefficients)", "",
             "Every pair of measured systems of one group that the model orders wrongly: the one predicted faster, "
             "its predicted lead (the other's predicted step time over its own, less 1) and its measured examples/s "
             "over the other's. Auto keeps the best-predicted built-in plan unless its searched plan is predicted "
             f"more than {TIE_MARGIN:.0%} faster (strategies/auto.py, TIE_MARGIN): the margin must exceed the "
             "largest lead here.", "",
             "| workload | profile | hosts | predicted faster | than | predicted lead | measured ratio |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {g['workload']} | {g['profile']} | {g['hosts']} | {a} | {b} | {lead:.1%} | {ratio:.3f} |"
              for lead, ratio, g, a, b in lost]
    largest = lost[0][0] if lost else 0.0
    verdict = "exceeds it" if TIE_MARGIN > largest else "does **not** exceed it"
    lines += ["", f"Largest predicted lead that measured as a loss: **{largest:.1%}**; the margin ({TIE_MARGIN:.0%}) "
                  f"{verdict}."]
    return lines


def _host_count_means(groups: list[dict]) -> list[str]:
    """Means over the groups whose link profile was also measured at other host counts: the
    analytical model against coefficients fitted on the other host counts only."""
    kinds = ("analytical", "leave-one-host-count-out")
    some = [g for g in groups if kinds[1] in g["models"]]
    if not some:
        return []
    names = ", ".join(f"{g['workload']} {g['profile']} {g['hosts']}h" for g in some)
    lines = ["", f"Fitted on the other host counts of the same link, means over {len(some)} groups ({names}):", "",
             "| coefficients | mean Kendall tau | mean rel. error |", "|---|---|---|"]
    for k in kinds:
        taus = [g["models"][k]["kendall_tau"] for g in some if g["models"][k]["kendall_tau"] is not None]
        lines.append(f"| {k} | {_two(float(np.mean(taus)) if taus else None)} | "
                     f"{np.mean([g['models'][k]['mean_relative_error'] for g in some]):.0%} |")
    return lines


if __name__ == "__main__":
    main()
