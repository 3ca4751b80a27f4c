"""Pure judgements of `cluster check`: facts a node reported → ✓/✗ with a one-line remedy.

No I/O here, so every threshold and every message is unit-tested without a cluster.
"`here`" is always the launching machine: every node must run what it runs (the same Python, TF
and adrun versions, the same script), because every worker rebuilds the graph from the script and
rewrites it by the strategy document the launcher planned here.
"""

from __future__ import annotations

from typing import Any

from adrun.spec import Node

from .report import CheckResult, PairBandwidth

MEMORY_PER_PROCESS = 512 << 20  # a TF 2.x process with a small graph; less usually means OOM kills
MIN_DISK_FREE = 1 << 30  # logs, checkpoints and the strategy file
MAX_CLOCK_SKEW = 1.0  # seconds; metrics, timeouts and log ordering compare node timestamps
GIB = 1 << 30

# (label shown, facts key); Python is compared on major.minor: TF wheels are built per minor
# version, a different patch level changes nothing the job depends on.
_VERSIONED = (("python", "python"), ("tf", "tensorflow"), ("keras", "keras"), ("adrun", "adrun"))


def passed(detail: str) -> CheckResult:
    return CheckResult("pass", detail)


def failed(detail: str, remedy: str) -> CheckResult:
    return CheckResult("fail", detail, remedy)


def skipped(detail: str) -> CheckResult:
    return CheckResult("skip", detail)


def _comparable(label: str, version: str | None) -> str | None:
    if version is None or label != "python":
        return version
    return ".".join(version.split(".")[:2])


def version_diff(here: dict[str, Any], there: dict[str, Any], address: str) -> list[str]:
    """Lines such as "tf 2.21.0 here, 2.20.0 on 10.0.0.2", one per differing component."""
    lines = []
    for label, key in _VERSIONED:
        mine, theirs = here.get(key), there.get(key)
        if _comparable(label, mine) == _comparable(label, theirs):
            continue
        why = f" ({there[key + '_error']})" if theirs is None and there.get(key + "_error") else ""
        lines.append(f"{label} {mine or 'missing'} here, {theirs or 'missing'} on {address}{why}")
    return lines


def judge_versions(here: dict[str, Any], there: dict[str, Any], address: str) -> CheckResult:
    diff = version_diff(here, there, address)
    if not diff:
        return passed(", ".join(f"{label} {there.get(key)}" for label, key in _VERSIONED))
    fixes = []
    for label, key in _VERSIONED:
        if any(line.startswith(label + " ") for line in diff):
            want = here.get(key)
            if want is None:
                fixes.append(f"{label} is missing on this machine")
            elif label == "python":
                fixes.append(f"use a Python {_comparable(label, want)} interpreter there (nodes[].python)")
            else:
                fixes.append(f"pip install {key}=={want} in {there.get('executable', 'its python')}")
    return failed("; ".join(diff), f"on {address}: " + "; ".join(fixes))


def judge_python(node: Node, python: str, returncode: int | None, stderr: str, address: str) -> CheckResult:
    """The probe could not report: say whether the interpreter is missing, broken or too slow."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
    activate = node.ssh.activate if node.ssh is not None else None
    if returncode is None:
        return failed(f"{python} did not answer in time on {address}",
                      f"run `{python} -c 'import tensorflow'` on {address} to see what hangs")
    if returncode in (126, 127):
        return failed(f"{python} not found or not executable on {address}: {last}",
                      f"install Python there or set nodes[].python to the interpreter path on {address}")
    if activate:
        return failed(f"`{activate}` then {python} failed on {address}: {last}",
                      f"run `{activate} && {python} -V` on {address}; fix ssh.activate or nodes[].python")
    return failed(f"{python} failed on {address}: {last}", f"run `{python} -V` on {address} to see why")


def judge_script(here: dict[str, Any] | None, there: dict[str, Any] | None, address: str) -> CheckResult:
    if here is None or there is None:
        return skipped("no script given")
    if there["sha256"] is None:
        return failed(f"{there['path']} not found on {address}",
                      f"copy the script to {there['path']} on {address} or set ssh.workdir")
    if there["sha256"] != here["sha256"]:
        return failed(f"{there['path']} on {address} differs from the copy here",
                      f"copy this machine's {here['path']} to {address} (same path)")
    return passed(there["path"])


def judge_ports(node: Node, ports: list[int], taken: list[int], address: str) -> CheckResult:
    if node.base_port is None:
        return skipped("chosen at launch")
    if not ports:
        return skipped("no process on this node")
    if taken:
        names = ", ".join(map(str, taken))
        return failed(f"port {names} in use on {address}",
                      f"stop what listens there (`ss -ltnp` on {address}) or choose another base_port")
    return passed(f"{ports[0]}-{ports[-1]} free")


def judge_exposure(problem: str | None, address: str) -> CheckResult:
    """Whether a job's TF ports on the node would be closed to hosts outside the job
    (`nodes/fence.py`), given why its rule could not be installed there (None: it can)."""
    if problem is None:
        return passed("task ports closed to other hosts (nftables)")
    return failed(f"a job's TensorFlow servers on {address} would accept connections from any host that can "
                  f"reach it, and run any graph sent to them: no packet-filter rule can be installed ({problem})",
                  f"let adrun run as root on {address} with nftables installed (apt-get install nftables), or keep "
                  "the nodes on a network no one else reaches and run with --allow-exposed (docs/security.md)")


def judge_cpus(node: Node, cpus: int | None, address: str) -> CheckResult:
    if cpus is None:
        return failed(f"cannot count the CPUs of {address}", "check /proc on the node")
    if node.cpus is not None and node.cpus > cpus:
        return failed(f"spec says {node.cpus} CPUs, {address} has {cpus}",
                      f"set cpus: {cpus} for {address} or use a larger machine")
    return passed(str(cpus))


def judge_memory(node: Node, total: int | None, available: int | None, address: str) -> CheckResult:
    if total is None or available is None:
        return skipped("unknown (no /proc/meminfo)")
    processes = node.workers + node.ps
    need = processes * MEMORY_PER_PROCESS
    detail = f"{available / GIB:.1f}/{total / GIB:.1f} GiB"
    if available < need:
        return failed(f"{available / GIB:.1f} GiB available on {address}, {processes} processes need about "
                      f"{need / GIB:.1f} GiB", f"free memory on {address} or run fewer processes there")
    return passed(detail)


def judge_gpus(node: Node, gpus: list[str] | None, address: str) -> CheckResult:
    found = len(gpus or [])
    detail = "none" if not found else f"{found}× {gpus[0]}"  # type: ignore[index]
    if node.gpus > found:
        why = "no nvidia-smi" if gpus is None else f"nvidia-smi lists {found}"
        return failed(f"spec says {node.gpus} GPUs, {address} has {found} ({why})",
                      f"install the NVIDIA driver on {address} or set gpus: {found}")
    return passed(detail)


def judge_disk(workdir: str, exists: bool, free: int | None, address: str) -> CheckResult:
    if not exists:
        return failed(f"working directory {workdir} does not exist on {address}",
                      f"create {workdir} on {address} (the same path as here) or set ssh.workdir")
    if free is None or free < MIN_DISK_FREE:
        return failed(f"{(free or 0) / GIB:.2f} GiB free in {workdir} on {address}",
                      f"free at least {MIN_DISK_FREE / GIB:.0f} GiB there for logs and checkpoints")
    return passed(f"{free / GIB:.0f} GiB free")


def judge_clock(skew: float | None, uncertainty: float, address: str) -> CheckResult:
    """`skew` = node clock minus this machine's, measured around one round trip of ± `uncertainty`."""
    if skew is None:
        return failed(f"could not read the clock of {address}", f"check that `date +%s.%N` works on {address}")
    detail = f"{skew:+.3f} s"
    if abs(skew) - uncertainty > MAX_CLOCK_SKEW:
        return failed(f"clock of {address} is {skew:+.2f} s off this machine's",
                      f"enable time sync (chrony or systemd-timesyncd) on {address} and here")
    return passed(detail)


def judge_bandwidth(address: str, pairs: list[PairBandwidth], reachable: bool, nodes: int) -> CheckResult:
    """The slowest measured link touching `address`; any failed transfer fails the check."""
    if nodes < 2:
        return skipped("single node")
    mine = [p for p in pairs if address in (p.source, p.target)]
    if not reachable or not mine:
        return skipped("not measured")
    broken = [p for p in mine if p.mbit_s is None]
    if broken:
        p = broken[0]
        return failed(f"no TCP stream from {p.source} to {p.target}: {p.error}",
                      f"allow TCP between the nodes (task ports and 1024-65535) and check routes on {p.target}")
    slowest = min(p.mbit_s for p in mine if p.mbit_s is not None)  # every pair measured: broken ones returned above
    return passed(f"{slowest:.0f} Mbit/s")
