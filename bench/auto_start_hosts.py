"""A first start's planning on a new multi-host cluster: namespace hosts shaped like the
benchmark's commodity profile (issue 21's goal: a first start's planning at most 10 s, a repeated
one at most 1 s).

bench/auto_start.py's in-process figure (`planning_beyond_capture`: from the moment the script's
graph is known to the plan) on HOSTS namespace hosts (tests/cluster/netns.py, root) at RATE_MBIT
(0: unshaped) instead of the local cluster: a first start there profiles, measures the network
(every ordered pair up to 4 hosts, rings beyond: launch/nodes/network_facts.py), fits and searches; a repeated one
reads the plan the first remembered. Writes one entry per invocation to bench/results/auto_start_hosts.json
(keyed by --label, e.g. the commit measured) and prints the medians.

    .venv/bin/python -m bench.auto_start_hosts [--hosts 4] [--rate-mbit 100] [--rounds 3] --label after
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from adrun.spec import load_spec
from bench.auto_start import EXAMPLES, planning_beyond_capture
from bench.cluster.network import write_adrun_spec
from bench.paths import RESULTS_DIR
from bench.results_log import append_entry
from tests.cluster.netns import NetnsCluster

OUT = RESULTS_DIR / "auto_start_hosts.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rate-mbit", type=float, default=100, help="0: unshaped")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--example", default="embedding.py", choices=sorted(EXAMPLES))
    parser.add_argument("--label", required=True, help="what is measured, e.g. the commit")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with NetnsCluster(args.hosts) as cluster, tempfile.TemporaryDirectory() as tmp:
        for host in cluster.hosts if args.rate_mbit else ():
            cluster.shape(host, args.rate_mbit)
        spec = load_spec(write_adrun_spec(cluster, args.hosts, Path(tmp) / "cluster.yml"))
        planning = planning_beyond_capture(args.example, EXAMPLES[args.example], args.rounds, Path(tmp), spec)
    append_entry(args.out, args.label, {"hosts": args.hosts, "rate_mbit": args.rate_mbit, "example": args.example,
                                        "rounds": args.rounds, "planning_beyond_capture": planning})
    print(json.dumps({key: value for key, value in planning.items() if key.endswith("median_s")}, indent=1))


if __name__ == "__main__":
    main()
