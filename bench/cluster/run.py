"""The benchmark cluster: adrun's builders and hand-written TF peers, on namespace hosts with shaped links.

    sudo .venv/bin/python -m bench.cluster.run --quick        # make bench-cluster-quick (24 runs, ~15 min)
    sudo .venv/bin/python -m bench.cluster.run                # make bench-cluster (FULL: 120 runs, ~2 h)
    sudo .venv/bin/python -m bench.cluster.run --tf2 --variants   # make bench-cluster-tf2 (Keras workloads, TF2 peers)

Builds the hosts (tests/cluster/netns.py: 1 worker + 1 PS per host), runs every configuration
(workload × profile × hosts × system) `--reps` times, interleaved round-robin (repetition r runs
every configuration, starting one further along each round), with repetitions alternating between
`--steps` and twice that many so the byte counters can be differenced. Results go to JSON after
every run (`--out`), then to a markdown report and PNG plots: `--markdown`, else beside `--out` with
its stem and `.md` (report.default_markdown), else, with neither, bench/RESULTS-cluster.md
(RESULTS-cluster-quick.md with `--quick`, so that a quick run leaves the full benchmark's report
alone; RESULTS-cluster-tf2.md with `--tf2`). The hosts are torn down on exit, also on Ctrl-C, SIGTERM or an
exception.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import click

from adrun.errors import UserError
from adrun.exit_codes import INTERRUPTED_EXIT_CODE
from adrun.spec import load_spec
from adrun.strategies.document import load_strategy
from tests.cluster.netns import NetnsCluster, missing_requirements

from ..paths import PEERS_DIR, REPO, RESULTS_DIR, WORKLOADS_DIR
from .estimate import estimate, load_history
from .launch import Launcher
from .lower_bound import lower_bound, pooled_facts
from .network import PROFILES, apply_profile
from .report import default_markdown, write_report
from .results import PEER_TF_MWMS, PEER_TF_PS, BenchResults, HookOverhead, LowerBound, RunConfig, RunResult, save_results
from .tf2_report import write_tf2_report
from .tf2 import GRAPH_TWINS, TF2_PEERS, TF2_WORKLOADS, script_args
from .touched_rows import distinct_rows

BUILDERS = ("PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce", "PartitionedAR", "Parallax",
            "Auto")
# builder options worth a row of their own, by --variants (none is in the default matrix: the quick
# run showed fp16 and chunking trade compute for bytes, which these links do not decide)
VARIANTS = (("PartitionedPS", (("max_shards", "8"),)), ("AllReduce", (("compressor", "fp16"),)),
            ("AllReduce", (("chunk_size", "1"),)), ("Parallax", (("compressor", "fp16"),)))
PEERS = (PEER_TF_PS, PEER_TF_MWMS)
WORKLOADS = ("sparse", "dense", "ncf", "embed")
# --tf2's default builders: the all-reduce family and Auto. TF2 mode also runs PS-only plans
# (strategies/document.py tf2_refusals), left out by default: with the lookup a row gather on the PS,
# sparse_keras on the 2-host commodity link ran PSLoadBalancing and PartitionedPS at 0.35x and 0.40x
# AllReduce in one invocation (2026-11-26, RESULTS-cluster-tf2-reading.md), not within reach of it
TF2_BUILDERS = ("AllReduce", "PartitionedAR", "Auto")


@dataclass(frozen=True)
class Block:
    """One product of the matrix: every workload × profile × host count × (builder or peer)."""

    workloads: tuple[str, ...]
    profiles: tuple[str, ...]
    hosts: tuple[int, ...]
    builders: tuple[str, ...]
    peers: tuple[str, ...]
    variants: bool = True  # --variants adds the builders' option rows here (not to a TF2 workload's graph twin)


# `make bench-cluster`, ~2 hours on the shared 2-core machine, one question per block:
# every workload on both links at 2 hosts against both peers, with the builders of each family
# and Auto (its plan made on each link by `adrun strategy build Auto`) (PSLoadBalancing, UnevenPartitionedPS and PartitionedAR sat between their family's neighbours in
# the quick run: --builders brings them back); then scaling (1 and 4 hosts; 2 is in the first
# block) for the sparse workload on the commodity link, with the two fastest builders at 2 and 4
# hosts and both peers.
FULL = (Block(("sparse", "dense", "ncf"), ("commodity", "datacenter"), (2,), ("PS", "PartitionedPS", "AllReduce", "Parallax", "Auto"),
              PEERS),
        Block(("sparse",), ("commodity",), (1, 4), ("AllReduce", "Parallax"), PEERS))
QUICK = Block(("sparse",), ("commodity",), (2,), BUILDERS, (PEER_TF_PS,))
# (steps, warm-up) of even repetitions per workload: start-up (SSH, capture, TF import, ~30 s here)
# dominates a sparse or ncf run; a dense step moves ~25 MB per worker, about a second at 100 Mbit/s
LENGTHS = {"sparse": (40, 5), "ncf": (40, 5), "dense": (16, 3), "embed": (40, 5)}
LENGTHS.update({tf2: LENGTHS[graph] for tf2, graph in GRAPH_TWINS.items()})  # the twins run alike
DEFAULT_LENGTH = (40, 5)
QUICK_LENGTH = (30, 5)


Variant = tuple[str, tuple[tuple[str, str], ...]]  # (builder, its options)


def matrix(blocks: tuple[Block, ...], variants: bool | tuple[Variant, ...]) -> list[RunConfig]:
    """Every (workload, profile, hosts, system) of the blocks, in block order, without repeats; 1
    host only under a block's first profile, as its traffic never leaves the host (the scaling
    tables use it for every profile); a peer only on workloads of its kind (`peer_serves`)."""
    configs: list[RunConfig] = []
    for b in blocks:
        systems = [("adrun", s, ()) for s in b.builders]
        chosen = VARIANTS if variants is True else variants or ()
        systems += [("adrun", s, o) for s, o in chosen if b.variants and s in b.builders]
        systems += [("peer", p, ()) for p in b.peers]
        configs += [RunConfig(workload=w, profile=p, hosts=h, kind=kind, system=s, options=o)
                    for w in b.workloads for p in b.profiles for h in b.hosts if h > 1 or p == b.profiles[0]
                    for kind, s, o in systems if kind == "adrun" or peer_serves(s, w)]
    return list(dict.fromkeys(configs))


def schedule(configs: list[RunConfig], reps: int,
             lengths: Mapping[str, tuple[int, int]]) -> list[tuple[int, RunConfig, int, int]]:
    """(repetition, configuration, steps, warm-up) in run order: round-robin over the configurations,
    each round starting one configuration further along (so none always runs first, after the same
    neighbour); odd rounds run twice the steps of `lengths[workload]`, for the byte counters'
    differencing."""
    order = []
    for rep in range(reps):
        shift = rep % len(configs)
        for config in configs[shift:] + configs[:shift]:
            steps, warmup = lengths[config.workload]
            order.append((rep, config, steps * (1 + rep % 2), warmup))
    return order


def run_lengths(workloads: list[str], quick: bool, steps: int | None, warmup: int | None) -> dict[str, tuple[int, int]]:
    """(steps, warm-up) per workload: the options when given, else the quick or per-workload defaults."""
    lengths = {}
    for workload in workloads:
        default_steps, default_warmup = QUICK_LENGTH if quick else LENGTHS.get(workload, DEFAULT_LENGTH)
        lengths[workload] = (steps or default_steps, warmup or default_warmup)
    return lengths


def peer_serves(peer: str, workload: str) -> bool:
    """Whether `peer` trains `workload`'s model: the graph-mode peers the graph-mode scripts' models,
    the TF2 peers the Keras workloads'."""
    return (peer in TF2_PEERS) == (workload in TF2_WORKLOADS)


def chosen_blocks(quick: bool, workloads: str | None, profiles: str | None, hosts: str | None, builders: str | None,
                  peers: str | None, tf2: bool = False) -> tuple[Block, ...]:
    """--quick's block; else FULL when no selection option is given (and not --tf2); else one block
    of the given selections, the others at everything (all workloads, both profiles, 1/2/4 hosts,
    all builders and peers; under --tf2: the Keras workloads, 2 and 4 hosts, TF2_BUILDERS and the
    TF2 peers), plus under --tf2 each chosen Keras workload's graph twin under AllReduce alone.
    Host counts must be whole numbers (ValueError)."""
    if quick:
        return (QUICK,)
    if (workloads, profiles, hosts, builders, peers) == (None,) * 5 and not tf2:
        return FULL
    everything = (TF2_WORKLOADS, "2,4", TF2_BUILDERS, TF2_PEERS) if tf2 else (WORKLOADS, "1,2,4", BUILDERS, PEERS)
    main = Block(workloads=tuple(_csv(workloads or ",".join(everything[0]))), profiles=tuple(_csv(profiles or ",".join(PROFILES))),
                 hosts=tuple(sorted({int(h) for h in _csv(hosts or everything[1])})),
                 builders=tuple(_csv(builders if builders is not None else ",".join(everything[2]))),
                 peers=tuple(_csv(peers if peers is not None else ",".join(everything[3]))))
    twins = tuple(GRAPH_TWINS[w] for w in main.workloads if tf2 and w in GRAPH_TWINS)
    if not twins:
        return (main,)
    return (main, Block(workloads=twins, profiles=main.profiles, hosts=main.hosts, builders=("AllReduce",), peers=(),
                        variants=False))


def with_given_plans(configs: list[RunConfig], blocks: tuple[Block, ...], plans: Mapping[str, Path]) -> list[RunConfig]:
    """`configs` and, for every (workload, profile, hosts) of the blocks (1 host under a block's
    first profile only, as in `matrix`), one configuration per given plan document (by its label)."""
    groups = dict.fromkeys((w, p, h) for b in blocks for w in b.workloads for p in b.profiles for h in b.hosts
                           if h > 1 or p == b.profiles[0])
    extra = [RunConfig(workload=w, profile=p, hosts=h, kind="adrun", system=label) for w, p, h in groups for label in plans]
    return configs + extra


def with_runtimes(configs: list[RunConfig], runtimes: Mapping[str, Path]) -> list[RunConfig]:
    """`configs` with, right after each adrun configuration, its twin per --runtime label: the same
    plan run by another checkout's adrun (so a round-robin schedule runs the two side by side)."""
    out = []
    for config in configs:
        out.append(config)
        if config.kind == "adrun":
            out += [config.model_copy(update={"runtime": label}) for label in runtimes]
    return out


def _labelled(option: str, item: str, value: str) -> tuple[str, str]:
    """`item` of `option` split as LABEL=`value`; exits 2 when either side is missing."""
    label, sep, rest = item.partition("=")
    if not sep or not label or not rest:
        _fail(f"{option} {item!r}: expected LABEL={value}")
    return label, rest


def _runtimes(items: tuple[str, ...]) -> dict[str, Path]:
    """--runtime LABEL=CHECKOUT options as {label: checkout}; exits 2 on a malformed or repeated
    item, or a checkout without a .venv/bin/python."""
    runtimes: dict[str, Path] = {}
    for item in items:
        label, checkout = _labelled("--runtime", item, "CHECKOUT")
        if label in runtimes:
            _fail(f"--runtime {item!r}: the label {label!r} is given twice")
        if not (Path(checkout) / ".venv" / "bin" / "python").is_file():
            _fail(f"--runtime {item!r}: {Path(checkout) / '.venv' / 'bin' / 'python'} not found "
                  "(make .venv/.adrun-installed in that checkout)")
        runtimes[label] = Path(checkout).resolve()
    return runtimes


def _given_plans(items: tuple[str, ...]) -> dict[str, Path]:
    """--plan LABEL=FILE options as {label: path}; exits 2 on a malformed item, a label that names a
    builder or peer, or a missing or invalid document."""
    plans: dict[str, Path] = {}
    for item in items:
        label, file = _labelled("--plan", item, "FILE")
        if label in BUILDERS or label in PEERS or label in plans:
            _fail(f"--plan {item!r}: the label {label!r} is already a builder, a peer or another --plan")
        try:
            load_strategy(Path(file))
        except (OSError, UserError) as e:
            _fail(f"--plan {item!r}: {e}")
        plans[label] = Path(file).resolve()
    return plans


def _variants(items: tuple[str, ...]) -> tuple[Variant, ...]:
    """--variant BUILDER:KEY=VALUE options as (builder, ((key, value),)); exits 2 on a malformed one
    or an unknown builder."""
    out = []
    for item in items:
        builder, _, option = item.partition(":")
        key, sep, value = option.partition("=")
        if builder not in BUILDERS or not sep or not key or not value:
            _fail(f"--variant {item!r}: expected BUILDER:KEY=VALUE with BUILDER one of {', '.join(BUILDERS)}")
        out.append((builder, ((key, value),)))
    return tuple(out)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _fail(message: str) -> None:
    click.echo(f"bench-cluster: error: {message}", err=True)
    sys.exit(2)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM takes Ctrl-C's path: every run stopped, the hosts torn down, partial results kept."""
    raise KeyboardInterrupt


AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def _machine() -> dict[str, str]:
    return {"arch": platform.machine(), "cpus": str(os.cpu_count()), "kernel": platform.release(),
            "scheduler autogroups": scheduler_autogroups(AUTOGROUP), "load average at start": _load_average()}


def scheduler_autogroups(setting: Path) -> str:
    """Whether the kernel groups each session's processes for the scheduler ("on", "off", "absent").

    With autogroups on, `nice` ranks threads only within their session's group: a niced job of another
    session still takes about an equal share of the CPUs from a benchmark (measured: a one-host PS run
    got 1.0 CPU beside one against 1.46 alone; docs/performance.md, "The one-host PS step"). Recorded
    so a result says whether the machine's other work could crowd it."""
    try:
        return "on" if setting.read_text().strip() == "1" else "off"
    except OSError:
        return "absent"


def _load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _versions() -> dict[str, str]:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"python": platform.python_version(), "tensorflow": importlib.metadata.version("tensorflow"),
            "adrun": importlib.metadata.version("adrun"), "commit": commit or "unknown"}


def hook_overhead(scratch: Path) -> HookOverhead:
    """The hook's single-process overhead from bench/hook_overhead.py (its `--out` JSON's
    `medians`), or a labelled gap when it fails."""
    out = scratch / "hook_overhead.json"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bench.hook_overhead", "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not out.exists():
        return HookOverhead(source=f"GAP: bench/hook_overhead.py exited {proc.returncode}: {proc.stderr[-300:]}",
                            wall_s=time.monotonic() - started)
    medians = json.loads(out.read_text())["medians"]
    return HookOverhead(plain_examples_per_s=medians["plain_examples_per_s"], adrun_examples_per_s=medians["adrun_examples_per_s"],
                        ratio=medians["ratio_examples_per_s"], cpu_ratio=medians["ratio_cpu_us_per_step"],
                        source="bench/hook_overhead.py (interleaved, medians)",
                        wall_s=time.monotonic() - started)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quick", is_flag=True, help="The sparse workload, commodity profile, 2 hosts, adrun's builders and tf_ps.")
@click.option("--tf2", is_flag=True, help="The TF2 benchmark: Keras workloads (keras_fit.py) against the TF2 peers, and "
              "each one's graph-mode twin under AllReduce; selections default to the TF2 ones.")
@click.option("--workloads", default=None, help=f"Comma-separated workload names [all: {','.join(WORKLOADS)}; --tf2: {','.join(TF2_WORKLOADS)}].")
@click.option("--profiles", default=None, help=f"Comma-separated profiles [all: {','.join(PROFILES)}].")
@click.option("--hosts", "host_counts", default=None, help="Comma-separated host counts [1,2,4].")
@click.option("--builders", default=None, help=f"Comma-separated adrun builders [all: {','.join(BUILDERS)}].")
@click.option("--peers", default=None, help=f"Comma-separated peers, empty for none [all: {','.join(PEERS)}; --tf2: {','.join(TF2_PEERS)}].")
@click.option("--plan", "plan_files", multiple=True, metavar="LABEL=FILE",
              help="Also run this strategy document as system LABEL in every group (repeatable): a hand-made plan "
                   "beside the builders', e.g. to tell the cost model's choice from the runtime's speed.")
@click.option("--runtime", "runtime_items", multiple=True, metavar="LABEL=CHECKOUT",
              help="Also run every adrun configuration, interleaved, with the same plan under another checkout's "
              "adrun (its .venv, e.g. a worktree of main), labelled 'SYSTEM @LABEL' (repeatable).")
@click.option("--variant", "variant_items", multiple=True, metavar="BUILDER:KEY=VALUE",
              help="Also this one builder with this option (repeatable), e.g. AllReduce:compressor=fp16; instead of --variants.")
@click.option("--variants/--no-variants", default=False, show_default=True,
              help="Also the chosen builders with non-default options (fp16, chunk_size, max_shards).")
@click.option("--reps", type=click.IntRange(min=3), default=3, show_default=True, help="Repetitions of each configuration.")
@click.option("--steps", type=click.IntRange(min=2), default=None,
              help="Steps of even repetitions (odd ones run twice as many), warm-up included "
                   "[default: 40, dense 16; --quick: 30].")
@click.option("--warmup", type=click.IntRange(min=1), default=None,
              help="Untimed steps at the start of each run [default: 5, dense 3; --quick: 5].")
@click.option("--hook-overhead/--no-hook-overhead", "measure_hook", default=None,
              help="Also run bench/hook_overhead.py [default: yes; --quick: no].")
@click.option("--timeout", type=click.FloatRange(min=10), default=1800, show_default=True, help="Seconds before a run is stopped.")
@click.option("--workloads-dir", type=click.Path(file_okay=False, path_type=Path), default=WORKLOADS_DIR,
              show_default=True, help="Where the workload scripts are.")
@click.option("--extra-args", default="", help="Appended to every workload's arguments, e.g. '--vocab 1000' for tiny runs.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Results JSON [default: bench/results/cluster[-quick].json].")
@click.option("--note", "notes", multiple=True, help="A remark to keep with the results and show in the report (repeatable).")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The report [default: --out's path with .md for its suffix; without --out, bench/RESULTS-cluster.md, "
                   "--quick: bench/RESULTS-cluster-quick.md, --tf2: bench/RESULTS-cluster-tf2.md].")
def main(quick: bool, tf2: bool, workloads: str | None, profiles: str | None, host_counts: str | None, builders: str | None,
         peers: str | None, plan_files: tuple[str, ...], runtime_items: tuple[str, ...], variant_items: tuple[str, ...], variants: bool, reps: int, steps: int | None, warmup: int | None, measure_hook: bool | None,
         timeout: float, workloads_dir: Path, extra_args: str, out: Path | None, notes: tuple[str, ...],
         markdown: Path | None) -> None:
    """Run the benchmark matrix on namespace hosts and write JSON, markdown and plots. Without
    selection options: the full matrix (every workload on both profiles at 2 hosts, the sparse
    workload at 1 and 4 hosts); with any of them, their product."""
    measure_hook = not quick if measure_hook is None else measure_hook
    markdown = markdown or default_markdown(out, tf2, quick)
    out = out or RESULTS_DIR / ("cluster-quick.json" if quick else "cluster-tf2bench.json" if tf2 else "cluster.json")
    try:
        blocks = chosen_blocks(quick, workloads, profiles, host_counts, builders, peers, tf2)
    except ValueError:
        _fail(f"--hosts {host_counts!r}: expected comma-separated whole numbers")
    chosen = {field: sorted({x for b in blocks for x in getattr(b, field)})
              for field in ("workloads", "profiles", "hosts", "builders", "peers")}
    lengths = run_lengths(chosen["workloads"], quick, steps, warmup)
    for w, (n, k) in lengths.items():
        if n <= k:
            _fail(f"{w}: --steps {n} must be more than --warmup {k}")
    for field, known in (("workloads", WORKLOADS + TF2_WORKLOADS), ("profiles", tuple(PROFILES)), ("builders", BUILDERS),
                         ("peers", PEERS + TF2_PEERS)):
        unknown = [x for x in chosen[field] if x not in known]
        if unknown:
            _fail(f"unknown {field[:-1]}(s) {', '.join(unknown)}; known: {', '.join(known)}")
    idle = [p for b in blocks for p in b.peers if not any(peer_serves(p, w) for w in b.workloads)]
    if idle:
        _fail(f"peer(s) {', '.join(dict.fromkeys(idle))} train none of the chosen workloads (the graph-mode peers "
              f"train {', '.join(WORKLOADS)}; the TF2 peers {', '.join(TF2_WORKLOADS)}, with --tf2)")
    counts = chosen["hosts"]
    if not counts or counts[0] < 1 or counts[-1] > 16:
        _fail(f"--hosts {host_counts!r}: each count must be 1..16")
    for path in [workloads_dir / script_args(w)[0] for w in chosen["workloads"]] + [PEERS_DIR / f"{p}.py" for p in chosen["peers"]]:
        if not path.is_file():
            _fail(f"{path} not found")

    given_plans = _given_plans(plan_files)
    runtimes = _runtimes(runtime_items)
    chosen_variants = variants or _variants(variant_items)
    # what this machine lacks is said after the command line's own mistakes
    reason = missing_requirements()
    if reason:
        _fail(reason)
    if importlib.util.find_spec("matplotlib") is None:
        _fail("matplotlib is missing: install the bench extra (.venv/bin/pip install -e '.[bench]')")
    configs = with_runtimes(with_given_plans(matrix(blocks, chosen_variants), blocks, given_plans), runtimes)
    order = schedule(configs, reps, lengths)
    guess = estimate([(c, n) for _, c, n, _ in order], load_history(RESULTS_DIR.glob("*.json")), measure_hook)
    click.echo(f"bench-cluster: {len(configs)} configurations × {reps} repetitions = {len(order)} runs on up to "
               f"{counts[-1]} hosts; results -> {out}")
    click.echo(f"bench-cluster: estimated {guess.seconds / 3600:.1f} h ({guess.seconds / 60:.0f} min) from the wall times "
               f"in bench/results/*.json ({guess.exact} of {guess.runs} runs with an earlier run of the same "
               f"configuration and length), plus capturing each workload's graph")
    results = BenchResults(
        started=datetime.now().isoformat(timespec="seconds"), command=shlex.join(["python", "-m", "bench.cluster.run", *sys.argv[1:]]),
        machine=_machine(), versions=_versions(), profiles=[PROFILES[p] for p in chosen["profiles"]],
        notes=["links have no added latency: this kernel has no netem qdisc", *notes],
    )
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with tempfile.TemporaryDirectory(prefix="adrun-bench-") as scratch, NetnsCluster(counts[-1]) as cluster:
            launcher = Launcher(cluster, REPO, Path(scratch), workloads_dir, tuple(shlex.split(extra_args)), timeout,
                                plan_files=given_plans, runtimes=runtimes)
            _run_matrix(launcher, cluster, order, reps, results, out)
        if measure_hook:
            click.echo("bench-cluster: hook overhead (bench/hook_overhead.py)")
            with tempfile.TemporaryDirectory(prefix="adrun-bench-hook-") as scratch:
                results.hook_overhead = hook_overhead(Path(scratch))
        else:
            results.hook_overhead = HookOverhead(source="GAP: not run (--no-hook-overhead, or --quick)")
    except KeyboardInterrupt:
        click.echo("bench-cluster: interrupted: hosts torn down; partial results kept", err=True)
        save_results(results, out)
        sys.exit(INTERRUPTED_EXIT_CODE)
    except RuntimeError as e:  # building or tearing down the namespace hosts failed; it says what
        save_results(results, out)
        click.echo(f"bench-cluster: error: {e}; partial results in {out}", err=True)
        sys.exit(1)
    results.finished = datetime.now().isoformat(timespec="seconds")
    results.machine["load average at end"] = _load_average()
    save_results(results, out)
    write_tf2_report(out, markdown) if tf2 else write_report(out, markdown)
    click.echo(f"bench-cluster: wrote {out} and {markdown}")


def _run_matrix(launcher: Launcher, cluster: NetnsCluster, order: list[tuple[int, RunConfig, int, int]], reps: int,
                results: BenchResults, out: Path) -> None:
    plans: dict[RunConfig, Path | str] = {}  # plan document, or why it could not be built
    for _, config, _, _ in order:  # plans that do not depend on the link, before any run
        if config.kind == "adrun" and not launcher.plan_sees_link(config):
            _plan(launcher, config, plans, results, out)
    shaped = None
    for rep, config, run_steps, warmup in order:
        if shaped != config.profile:
            apply_profile(cluster, PROFILES[config.profile])
            shaped = config.profile
        plan = _plan(launcher, config, plans, results, out) if config.kind == "adrun" else None
        if isinstance(plan, str):
            result = RunResult(config=config, repetition=rep, steps=run_steps, warmup=warmup, exit_code=-1,
                               error=f"no plan: {plan}", wall_s=0.0)
        else:
            result = launcher.run(config, rep, run_steps, warmup, plan)
        results.runs.append(result.model_copy(update={"load_average": os.getloadavg()[0]}))
        save_results(results, out)
        rate = f"{result.examples_per_s:,.0f} examples/s" if result.examples_per_s is not None else (
            (result.error or "failed").splitlines()[0][:200])
        click.echo(f"  [{rep + 1}/{reps}] {config.workload} {config.profile} {config.hosts}h {config.label}: "
                   f"{rate} ({result.wall_s:.0f} s, load {_load_average()})")


def _plan(launcher: Launcher, config: RunConfig, plans: dict[RunConfig, Path | str], results: BenchResults,
          out: Path) -> Path | str:
    """The configuration's plan document (built on first use, with its lower bound, and kept beside
    `out`: `kept_plan`), or why there is none. A plan that sees the link (Auto's) is made once per
    profile, on the shaped link; a --runtime twin runs its counterpart's."""
    config = config.planned
    sees_link = launcher.plan_sees_link(config)
    key = config if sees_link else config.model_copy(update={"profile": ""})
    if key in plans:
        return plans[key]
    click.echo(f"  plan {config.label} for {config.workload} on {config.hosts} host(s)"
               + (f", {config.profile} link" if sees_link else ""))
    try:
        plans[key] = plan = launcher.build_plan(config)
    except UserError as e:
        plans[key] = str(e)
        return plans[key]
    shutil.copyfile(plan, kept_plan(out, key))
    document = load_strategy(plan)
    sent, method = lower_bound(document, load_spec(launcher.spec(config.hosts)),
                               distinct_rows(launcher.workloads, config.workload, document),
                               pooled_facts(launcher.graph(config.workload, config.hosts)))
    results.lower_bounds.append(LowerBound(workload=config.workload, hosts=config.hosts, system=config.label,
                                           profile=config.profile if sees_link else "", sent_per_host=sent,
                                           method=method))
    return plan

def kept_plan(out: Path, config: RunConfig) -> Path:
    """Where the plan `config` ran is kept: `plans/<out's stem>/` beside the results, as
    `WORKLOAD-HOSTS-PROFILE-LABEL.yml` for a plan made on one link (Auto's) and `WORKLOAD-HOSTS-LABEL.yml`
    for one made for every link; its folder made. These are the names bench/cost_model_check.py reads
    (it judges the plan that ran); the plans are built in a scratch folder that goes with the run."""
    folder = out.parent / "plans" / out.stem
    folder.mkdir(parents=True, exist_ok=True)
    label = re.sub(r"[^\w.@-]+", "_", config.label).strip("_")
    link = f"-{config.profile}" if config.profile else ""
    return folder / f"{config.workload}-{config.hosts}{link}-{label}.yml"


if __name__ == "__main__":
    main()
