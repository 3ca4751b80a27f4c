"""What measuring the network adds to a first start on a new multi-host cluster, and how close the
measured figures come to the shapers' truth (issue 21's goal: a first start's planning at most 10 s).

Builds HOSTS namespace hosts (tests/cluster/netns.py, root), shapes every host's link to RATE_MBIT
(token bucket both ways, as the benchmark's profiles do; 0: unshaped), connects as a first start
does, then times `network_facts` REPS times (the chief's loopback, the ordered pairs it measures,
each one's bucket and queue: every pair up to 4 hosts, rings beyond, the rest assumed; each link's
`source` is kept, and the errors against the shapers' truth cover the assumed pairs too). The rest of a first start's planning (profile steps, fit, search) does
not grow with the hosts: bench/auto_start.py measures it. Writes one entry per invocation to
bench/results/network_start.json (keyed by --label, e.g. the commit measured) and prints a summary.

    .venv/bin/python -m bench.network_start [--hosts 4] [--rate-mbit 100] [--reps 3] --label after
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from adrun.launch.job.provision import RemoteNodes
from adrun.launch.nodes import network_facts as network_facts_module
from adrun.spec import load_spec
from bench.cluster.network import write_adrun_spec
from bench.cost_model_check import PAYLOAD_SHARE
from bench.paths import RESULTS_DIR
from bench.results_log import run_labelled_hosts_benchmark
from tests.cluster.netns import NetnsCluster, bucket_bytes, queue_bytes

OUT = RESULTS_DIR / "network_start.json"


def error(measured: float, truth: float) -> float:
    """Relative error of `measured` against `truth`."""
    return measured / truth - 1


def measure(hosts: int, rate_mbit: float, reps: int) -> dict:
    truth = {"mbit": rate_mbit * PAYLOAD_SHARE, "burst": bucket_bytes(rate_mbit) * PAYLOAD_SHARE,
             "queue": queue_bytes(rate_mbit) * PAYLOAD_SHARE} if rate_mbit else None
    runs = []
    with NetnsCluster(hosts) as cluster, tempfile.TemporaryDirectory() as tmp:
        if rate_mbit:
            for host in cluster.hosts:
                cluster.shape(host, rate_mbit)
        spec = load_spec(write_adrun_spec(cluster, hosts, Path(tmp) / "cluster.yml"))
        with RemoteNodes(spec) as remote:
            remote.connect()
            for _ in range(reps):
                began = time.monotonic()
                facts = network_facts_module.network_facts(spec, remote)
                seconds = time.monotonic() - began
                links = [{"src": link.src, "dst": link.dst, "mbit": link.bytes_per_s * 8 / 1e6,
                          "latency_us": link.latency_s * 1e6, "burst": link.burst_bytes, "queue": link.queue_bytes,
                          "source": link.source}
                         for link in facts.links]
                runs.append({"seconds": seconds, "links": links, "shared_cpus": facts.shared_cpus,
                             "local_mbit": facts.local.bytes_per_s * 8 / 1e6})
                measured = sum(link.source == "measured" for link in facts.links)
                print(f"{hosts} hosts at {rate_mbit or 'unshaped'} Mbit/s: {seconds:.1f} s "
                      f"({measured} of {len(facts.links)} pairs measured)", flush=True)
    summary = {"median_s": statistics.median(run["seconds"] for run in runs),
               "pairs": {source: sum(link["source"] == source for run in runs for link in run["links"]) / len(runs)
                         for source in ("measured", "assumed")}}
    if truth is not None:
        for name in ("mbit", "burst", "queue"):
            errors = [error(link[name], truth[name]) for run in runs for link in run["links"]]
            summary[f"{name}_error"] = {"min": min(errors), "max": max(errors)}
    return {"hosts": hosts, "rate_mbit": rate_mbit, "reps": reps, "truth": truth, "summary": summary, "runs": runs,
            "stream_s": network_facts_module.STREAM_S}


def main() -> None:
    run_labelled_hosts_benchmark(__doc__.splitlines()[0], measure, out=OUT, hosts=4, reps=3)

if __name__ == "__main__":
    main()
