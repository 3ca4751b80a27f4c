"""How late heartbeats arrive on this machine under load: the numbers behind the keeper's lease.

A remote task's keeper and the launcher each declare the other gone after hearing nothing for
`SILENCE_S` in launch/job/remote.py (docs/multi-node.md, "Teardown guarantees"). That timeout must exceed
the longest gap a busy machine puts between two heartbeats, or a slow moment ends a healthy job.
This measures those gaps over the same path: network-namespace hosts (tests/cluster/netns.py,
needs root), one SSH connection per host (paramiko, as the launcher's), several channels each,
and on each channel a Python program on the host that, like the keeper, writes a heartbeat every
`--interval` seconds from a thread and reads the launcher's pings from stdin. The launcher side
pings every channel from one thread, as `NodeLink` does. Both sides record the time between
consecutive arrivals. Run it while the machine does its usual work (several TensorFlow jobs);
`--load N` adds N busy Python processes of its own.

    sudo .venv/bin/python -m bench.heartbeat_gaps [--hosts 2] [--channels 3] [--minutes 5] [--interval 1] [--load 0]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import statistics
import sys
import threading
import time

from fabric import Connection

from tests.cluster.netns import NetnsCluster, missing_requirements

_NODE_PROGRAM = r"""
import json, sys, threading, time
interval = float(sys.argv[1])
gaps, last = [], [time.monotonic()]
def beat():
    while True:
        time.sleep(interval)
        sys.stderr.write("B\n"); sys.stderr.flush()
threading.Thread(target=beat, daemon=True).start()
for line in sys.stdin:
    now = time.monotonic()
    if line.strip() == "REPORT":
        print(json.dumps(gaps[1:]), flush=True)
        break
    gaps.append(now - last[0]); last[0] = now
"""


def _burn(stop: multiprocessing.Event) -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


class _Channel:
    """One channel: the program on the host, and the arrival gaps of its heartbeats here."""

    def __init__(self, conn: Connection, interval: float) -> None:
        self.channel = conn.client.get_transport().open_session()
        self.channel.exec_command(f"{shlex.quote(sys.executable)} -u -c {shlex.quote(_NODE_PROGRAM)} {interval}")
        self.gaps: list[float] = []
        self._stderr = self.channel.makefile_stderr("rb")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        last = time.monotonic()
        for _ in self._stderr:
            now = time.monotonic()
            self.gaps.append(now - last)
            last = now

    def node_gaps(self) -> list[float]:
        self.channel.sendall(b"REPORT\n")
        return json.loads(self.channel.makefile("rb").readline())


def _summary(gaps: list[float]) -> dict[str, float]:
    ordered = sorted(gaps)
    return {"n": len(ordered), "median": statistics.median(ordered),
            "p99": ordered[int(0.99 * (len(ordered) - 1))], "p999": ordered[int(0.999 * (len(ordered) - 1))],
            "max": ordered[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--channels", type=int, default=3, help="channels (keepers) per host")
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between heartbeats and pings")
    parser.add_argument("--load", type=int, default=0, help="extra busy processes on this machine")
    args = parser.parse_args()
    if reason := missing_requirements():
        sys.exit(f"heartbeat_gaps: {reason}")
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.load)]
    for proc in burners:
        proc.start()
    try:
        with NetnsCluster(args.hosts) as cluster:
            conns = [Connection(h.address, user="root", connect_kwargs={
                "key_filename": [str(cluster.client_key)], "look_for_keys": False, "allow_agent": False})
                for h in cluster.hosts]
            for conn in conns:
                conn.client.load_system_host_keys(str(cluster.known_hosts))
                conn.open()
            channels = [_Channel(conn, args.interval) for conn in conns for _ in range(args.channels)]
            deadline = time.monotonic() + args.minutes * 60
            while time.monotonic() < deadline:
                time.sleep(args.interval)
                for channel in channels:
                    channel.channel.sendall(b"PING\n")
            to_launcher = [g for c in channels for g in c.gaps[1:]]
            to_node = [g for c in channels for g in c.node_gaps()]
            for conn in conns:
                conn.close()
    finally:
        stop.set()
        for proc in burners:
            proc.join(timeout=5)
    result = {"interval_s": args.interval, "minutes": args.minutes, "hosts": args.hosts, "channels": args.channels,
              "extra_load": args.load, "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
              "keeper_to_launcher": _summary(to_launcher), "launcher_to_keeper": _summary(to_node)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
