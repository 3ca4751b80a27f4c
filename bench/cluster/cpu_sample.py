"""Where a benchmark run's CPU time goes: samples /proc beside `bench.cluster.run`, one line of JSON each.

    python -m bench.cluster.cpu_sample --out /tmp/cpu.jsonl &   # then run the benchmark; kill it after

Each sample: the time, the machine's CPU counters (/proc/stat: user, nice, system, idle, irq,
softirq, in clock ticks), the bytes every namespace host sent (the root-namespace ends of the
benchmark bridge's veth pairs, `adr*h*`, whose received bytes are what the hosts sent), and the
CPU ticks (user + system) so far of each process of the benchmark: workers (a workload script), PS
tasks (adrun's PS server), the kernel's softirq threads, and the rest of adrun (launchers, ssh).
`bench/cluster/cpu_report.py` reads the file: CPU seconds per step and process while the hosts
move a run's bytes. Why: on namespace hosts of one machine the bytes between hosts cost the same
CPUs the workers compute on (docs/cost-model.md, "Hosts sharing one machine"); how much, per byte
and per plan, is what the cost model's shared-CPU term needs measured.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

NET = Path("/sys/class/net")


def role(cmdline: str, comm: str) -> str | None:
    """The process's part in a benchmark run, None for a process that is none of the benchmark's."""
    if comm.startswith("ksoftirqd"):
        return "softirq"
    if "adrun.runtime.ps_server" in cmdline or "adrun.runtime.tf2.ps_task" in cmdline:
        return "ps"
    if "/workloads/" in cmdline:
        return "worker"
    if "adrun" in cmdline or comm == "sshd":
        return "adrun"
    return None


def processes(root_netns: str) -> dict[int, tuple[str, int]]:
    """{pid: (role, CPU ticks so far)} of the benchmark's processes: those of the namespace hosts
    (a network namespace other than `root_netns`, so that other users' scripts on the machine are
    not counted) and the kernel's softirq threads."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            netns = os.readlink(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        kind = role(cmdline, comm)
        if kind != "softirq" and netns == root_netns:
            continue
        if kind is not None:
            out[int(entry)] = (kind, int(fields[11]) + int(fields[12]))  # utime + stime
    return out


def machine() -> dict[str, int]:
    """/proc/stat's first line, by name."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    values = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return dict(zip(names, map(int, values), strict=False))


def hosts_sent() -> int:
    """Bytes the namespace hosts have sent: received by the bridge's ends of their veth pairs."""
    total = 0
    for dev in NET.glob("adr*h*"):
        try:
            total += int((dev / "statistics" / "rx_bytes").read_text())
        except OSError:
            continue
    return total


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--interval", type=click.FloatRange(min=0.05), default=0.25, show_default=True)
def main(out: Path, interval: float) -> None:
    root_netns = os.readlink("/proc/self/ns/net")
    with out.open("a") as f:
        while True:
            sample = {"t": time.time(), "cpu": machine(), "sent": hosts_sent(),
                      "procs": {pid: list(v) for pid, v in processes(root_netns).items()}}
            f.write(json.dumps(sample) + "\n")
            f.flush()
            time.sleep(interval)


if __name__ == "__main__":
    main()
