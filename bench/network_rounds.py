"""Where a round of the network measurement's time goes, on namespace hosts (issue 21: a first
start's planning at most 10 s; a round of 4 transfers took about 2 s here).

Builds HOSTS namespace hosts (tests/cluster/netns.py, root) shaped to RATE_MBIT, connects as a first
start does, and measures the rounds a first start measures (every ordered pair up to 4 hosts, rings
+1 and +2 beyond: launch/nodes/network_facts.py) REPS times, each rep with its own standing probes
(launch/nodes/standing_probes.py): their `start` (every node's probe and the chief's spare started
and ready, once a rep), each round's `wall` time, its longest `transfer` (a sender's command to its
answer; `stream` the stream alone, as the sender timed it) and the rest (`overhead`: the round's
threads), and their `stop` (once a rep). Writes one entry per invocation to
bench/results/network_rounds.json and prints each round's figures. (The "before" entry there came
from this script's first version, e39c0b8, which timed each transfer's two probe processes started
over SSH: `start`, `transfer`, `teardown` per round.)

    .venv/bin/python -m bench.network_rounds [--hosts 8] [--rate-mbit 100] [--reps 2] --label after
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from adrun.launch.job.provision import RemoteNodes
from adrun.launch.nodes import network_facts as network_facts_module
from adrun.launch.nodes.pair_schedule import pair_rounds, ring_rounds
from adrun.launch.nodes.standing_probes import StandingProbes
from adrun.launch.nodes.transfer import Transfer
from adrun.spec import load_spec
from bench.cluster.network import write_adrun_spec
from bench.paths import RESULTS_DIR
from bench.results_log import run_labelled_hosts_benchmark
from tests.cluster.netns import NetnsCluster

OUT = RESULTS_DIR / "network_rounds.json"


class TimedProbes(StandingProbes):
    """StandingProbes whose every transfer's time (command to answer) and stream are kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times_lock = threading.Lock()
        self.times: list[tuple[float, float]] = []

    def measure(self, *args: Any, **kwargs: Any) -> Transfer:
        began = time.monotonic()
        done = super().measure(*args, **kwargs)
        with self.times_lock:
            self.times.append((time.monotonic() - began, done.seconds))
        return done


def measure(hosts: int, rate_mbit: float, reps: int) -> dict:
    rounds_out, reps_out = [], []
    with NetnsCluster(hosts) as cluster, tempfile.TemporaryDirectory() as tmp:
        if rate_mbit:
            for host in cluster.hosts:
                cluster.shape(host, rate_mbit)
        spec = load_spec(write_adrun_spec(cluster, hosts, Path(tmp) / "cluster.yml"))
        addresses = [node.address for node in spec.nodes]
        schedule = (pair_rounds(addresses) if network_facts_module.measures_every_pair(hosts)
                    else [pairs for shift in (1, 2) for pairs in ring_rounds(addresses, shift)])
        with RemoteNodes(spec) as remote:
            remote.connect()
            endpoints = {node.address: network_facts_module._endpoint(node, remote) for node in spec.nodes}
            for rep in range(reps):
                probes = TimedProbes(list(endpoints.values()), spare=endpoints[spec.chief.address])
                began = time.monotonic()
                with probes:
                    start = time.monotonic() - began
                    rounds = network_facts_module._Rounds(probes, endpoints, None)
                    for pairs in schedule:
                        probes.times.clear()
                        round_began = time.monotonic()
                        rounds.measure([pairs])
                        wall = time.monotonic() - round_began
                        transfer = max(seconds for seconds, _ in probes.times)
                        row = {"rep": rep, "pairs": len(pairs), "wall_s": wall, "transfer_s": transfer,
                               "stream_s": max(stream for _, stream in probes.times), "overhead_s": wall - transfer}
                        rounds_out.append(row)
                        print(f"rep {rep}, a round of {len(pairs)}: {wall:.2f} s = transfer {transfer:.2f} "
                              f"(stream {row['stream_s']:.2f}) + {row['overhead_s']:.3f}", flush=True)
                    stopping = time.monotonic()
                reps_out.append({"start_s": start, "stop_s": time.monotonic() - stopping})
                print(f"rep {rep}: probes started in {start:.2f} s, stopped in {reps_out[-1]['stop_s']:.2f} s")
    summary = {f"{key}_median": statistics.median(row[key] for row in rounds_out)
               for key in ("wall_s", "transfer_s", "stream_s", "overhead_s")}
    summary |= {f"{key}_median": statistics.median(rep[key] for rep in reps_out) for key in ("start_s", "stop_s")}
    return {"hosts": hosts, "rate_mbit": rate_mbit, "reps": reps, "summary": summary, "rounds": rounds_out,
            "probes": reps_out}


def main() -> None:
    run_labelled_hosts_benchmark(__doc__.splitlines()[0], measure, out=OUT, hosts=8, reps=2)

if __name__ == "__main__":
    main()
