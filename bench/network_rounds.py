"""Where a round of the network measurement's time goes, on namespace hosts (issue 21: a first
start's planning at most 10 s; a round of 4 transfers took about 2 s here).

Builds HOSTS namespace hosts (tests/cluster/netns.py, root) shaped to RATE_MBIT, connects as a first
start does, and measures the rounds a first start measures (every ordered pair up to 4 hosts, rings
+1 and +2 beyond: launch/nodes/network_facts.py) REPS times, timing each probe process: from the
launcher's SSH command to the probe's interpreter running its first line, its exit, the command's
return here: a round's `start` (until both probes of its last transfer run), `transfer` (from both
probes running to the sender's exit: the carried modules' compile, connect, round trips, stream,
blast; `stream` the stream alone) and `teardown` (from the last sender's exit to the round's end).
The probe's source is prefixed, for this benchmark only, with a line that prints those two instants
to stderr (the hosts share one kernel's clock). Writes one entry per invocation to
bench/results/network_rounds.json and prints each round's figures.

    .venv/bin/python -m bench.network_rounds [--hosts 8] [--rate-mbit 100] [--reps 2] --label before
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import tempfile
import threading
import time
from pathlib import Path

from adrun.launch.job.provision import RemoteNodes
from adrun.launch.nodes import network_facts as network_facts_module
from adrun.launch.nodes import transfer
from adrun.launch.nodes.pair_schedule import pair_rounds, ring_rounds
from adrun.launch.nodes.shell import Completed, SSHShell
from adrun.spec import load_spec
from bench.cluster.network import write_adrun_spec
from bench.results_log import append_entry
from tests.cluster.netns import NetnsCluster

OUT = Path(__file__).resolve().parent / "results" / "network_rounds.json"
MARK = "@@T "
TIMING = ("import time as _t, atexit as _a, sys as _s\n_t0 = _t.time()\n"
          f"_a.register(lambda: _s.stderr.write('{MARK}%r %r\\n' % (_t0, _t.time())))\n")


class Timed:
    """SSHShell.run, timed: each probe command's call, its probe's first line and exit, its return
    (seconds since the epoch), with its mode and port."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[dict] = []
        self.run = SSHShell.run

    def __call__(self, shell: SSHShell, command: str, timeout: float) -> Completed:
        called = time.time()
        done = self.run(shell, command, timeout)
        returned = time.time()
        marks = [line for line in done.stderr.splitlines() if line.startswith(MARK)]
        mode, args = shlex.split(command)[-2:]
        if marks and mode in ("send", "recv"):
            first, last = (float(x) for x in marks[-1][len(MARK):].split())
            port = json.loads(args)["port"]
            result = transfer.parse_probe(done.stdout) or {}
            with self.lock:
                self.runs.append({"mode": mode, "port": port, "called": called, "first": first, "last": last,
                                  "returned": returned, "stream": result.get("seconds")})
        return done


def split(runs: list[dict], began: float, ended: float) -> dict:
    """A round's time from its start (`began`): `start`, until both probes of its last transfer to
    get them ran their first line; `transfer`, the longest from a transfer's both probes running to
    its sender's exit; `teardown`, from the last sender's exit to the round's end."""
    transfers = []
    for port in {run["port"] for run in runs}:
        both = {run["mode"]: run for run in runs if run["port"] == port}
        ready = max(run["first"] for run in both.values())
        transfers.append({"ready": ready - began, "transfer": both["send"]["last"] - ready,
                          "sender_start": both["send"]["first"] - both["send"]["called"],
                          "receiver_start": both["recv"]["first"] - both["recv"]["called"],
                          "stream": both["send"]["stream"], "exit": max(run["last"] for run in both.values()) - began})
    last_exit = max(item["exit"] for item in transfers)
    return {"wall_s": ended - began, "start_s": max(item["ready"] for item in transfers),
            "transfer_s": max(item["transfer"] for item in transfers),
            "stream_s": max(item["stream"] for item in transfers), "teardown_s": ended - began - last_exit,
            "transfers": transfers}


def measure(hosts: int, rate_mbit: float, reps: int) -> dict:
    timed = Timed()
    transfer.PROBE_SOURCE = TIMING + transfer.PROBE_SOURCE
    SSHShell.run = lambda shell, command, timeout: timed(shell, command, timeout)  # type: ignore[method-assign]
    rounds_out = []
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
                rounds = network_facts_module._Rounds(endpoints, None)
                for pairs in schedule:
                    timed.runs.clear()
                    began = time.time()
                    rounds.measure([pairs])
                    row = {"rep": rep, "pairs": len(pairs), **split(list(timed.runs), began, time.time())}
                    rounds_out.append(row)
                    print(f"rep {rep}, a round of {len(pairs)}: {row['wall_s']:.2f} s = start {row['start_s']:.2f} + "
                          f"transfer {row['transfer_s']:.2f} (stream {row['stream_s']:.2f}) + teardown {row['teardown_s']:.2f}", flush=True)
    summary = {f"{key}_median": statistics.median(row[key] for row in rounds_out)
               for key in ("wall_s", "start_s", "transfer_s", "stream_s", "teardown_s")}
    return {"hosts": hosts, "rate_mbit": rate_mbit, "reps": reps, "summary": summary, "rounds": rounds_out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--rate-mbit", type=float, default=100, help="0: unshaped")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--label", required=True, help="what is measured, e.g. the commit")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    entry = append_entry(args.out, args.label, measure(args.hosts, args.rate_mbit, args.reps))
    print(json.dumps({"label": args.label, **entry["summary"]}, indent=1))


if __name__ == "__main__":
    main()
