"""Bytes on the wire per training step and host, beside the strategy family's lower bound.

Builds two network-namespace hosts (tests/cluster/netns.py; needs root), each running one worker
and one PS of an adrun job over SSH, trains the benchmark's sparse workload (bench/workloads/sparse.py,
at its default sizes) twice with different step counts, and differences each host's interface byte
counters (eth0 tx/rx) around the two runs: what the extra steps sent and received, with start-up,
initialization and teardown cancelled out. The bound is strategies/wire_bound.py's for the plan
adrun made and the distinct rows each worker's batches touch per step (bench/cluster/touched_rows.py,
from the workload's own data). bench/cluster measures the same figure inside its matrix; this is
the one-strategy version.

    sudo .venv/bin/python -m bench.wire_bytes [--strategy PSLoadBalancing] [--steps 60 160] [--json out.json]

Prints one row per host: measured and bound bytes per step, sent and received, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a file (`python bench/wire_bytes.py`): `bench` is no package to import from
    sys.exit("run from the repository root as python -m bench.wire_bytes")

from adrun.capture_run import capture_graph
from adrun.spec import load_spec
from adrun.strategies.document import load_strategy
from adrun.strategies.wire_bound import lower_bound
from bench.cluster.lower_bound import pooled_facts
from bench.cluster.touched_rows import distinct_rows
from bench.paths import REPO, WORKLOADS_DIR
from tests.cluster.netns import NetnsCluster, NetnsHost, missing_requirements

SCRIPT = WORKLOADS_DIR / "sparse.py"
WARMUP = 5  # the workload's untimed steps; the byte counters cover the whole run anyway
RUN_TIMEOUT_S = 1800


def interface_bytes(host: NetnsHost) -> tuple[int, int]:
    """(sent, received) bytes so far on the host's eth0."""
    def read(counter: str) -> int:
        path = f"/sys/class/net/eth0/statistics/{counter}"
        return int(subprocess.run(host.exec_argv("cat", path), capture_output=True, text=True, check=True).stdout)

    return read("tx_bytes"), read("rx_bytes")


def write_spec(path: Path, cluster: NetnsCluster) -> Path:
    """Each host: one worker and one PS, reached over SSH as root; the first host is the chief."""
    lines = ["version: 1", "nodes:"]
    for i, host in enumerate(cluster.hosts):
        lines += [f"  - address: {host.address}", f"    chief: {'true' if i == 0 else 'false'}",
                  "    workers: 1", "    ps: 1", "    ssh:", "      user: root",
                  f"      identity_file: {cluster.client_key}", f"      known_hosts: {cluster.known_hosts}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def adrun(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "adrun", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=REPO, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"wire_bytes: adrun {' '.join(args[:4])} ... exited {proc.returncode}:\n"
                         f"{proc.stdout}{proc.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", default="PSLoadBalancing")
    parser.add_argument("--strategy-opt", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, nargs=2, default=[60, 160], metavar=("SHORT", "LONG"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    short, long = args.steps
    if not WARMUP < short < long:
        raise SystemExit(f"wire_bytes: --steps {short} {long}: need {WARMUP} < SHORT < LONG")
    reason = missing_requirements()
    if reason:
        raise SystemExit(f"wire_bytes: {reason}")
    opts = [a for o in args.strategy_opt for a in ("--strategy-opt", o)]
    with NetnsCluster(2) as cluster, tempfile.TemporaryDirectory(prefix="adrun-wire-") as tmp:
        work = Path(tmp)
        spec_path = write_spec(work / "cluster.yml", cluster)
        plan_path = work / "plan.yml"
        adrun("strategy", "build", args.strategy, "--spec", str(spec_path), *opts, "-o", str(plan_path),
              str(SCRIPT), "--steps", "2", "--warmup", "1")
        traffic = {}
        for steps in (short, long):
            before = {h.address: interface_bytes(h) for h in cluster.hosts}
            adrun("--spec", str(spec_path), "--strategy", str(plan_path), "--quiet", str(SCRIPT), "--steps", str(steps),
                  "--warmup", str(WARMUP))
            after = {h.address: interface_bytes(h) for h in cluster.hosts}
            traffic[steps] = {a: (after[a][0] - before[a][0], after[a][1] - before[a][1]) for a in after}
        strategy, spec = load_strategy(plan_path), load_spec(spec_path)
    graph = capture_graph(SCRIPT, ["--steps", "2", "--warmup", "1"], strategy.num_workers, "wire-bytes-capture")
    bound = lower_bound(strategy, distinct_rows(WORKLOADS_DIR, "sparse", strategy), spec, pooled_facts(graph))
    rows = []
    for host in traffic[long]:
        sent, received = (
            (traffic[long][host][k] - traffic[short][host][k]) / (long - short) for k in (0, 1))
        bound_sent, bound_received = float(bound.per_host[host].sent), float(bound.per_host[host].received)
        rows.append({"host": host, "sent": sent, "received": received, "bound_sent": bound_sent,
                     "bound_received": bound_received})
    print(f"{args.strategy} {' '.join(args.strategy_opt)}: bytes per step ({long} - {short} steps), "
          f"bound from strategies/wire_bound.py")
    print("| host | sent | bound | ratio | received | bound | ratio |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['host']} | {r['sent']:,.0f} | {r['bound_sent']:,.0f} | {r['sent'] / r['bound_sent']:.3f} "
              f"| {r['received']:,.0f} | {r['bound_received']:,.0f} | {r['received'] / r['bound_received']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"strategy": args.strategy, "options": args.strategy_opt,
                                         "steps": [short, long], "hosts": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
