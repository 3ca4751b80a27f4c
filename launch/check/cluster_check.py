"""`adrun cluster check`: probe every node of a spec in parallel and report ✓/✗ per check.

Why before launch: a multi-node job that cannot reach a node, finds another TF version or a
taken port fails minutes later as a hang or a gRPC error far from its cause. Here every node
is connected once (SSH, or directly when it is this machine), runs `probe.py` with the
interpreter its tasks will use, and the facts are compared with this machine's. Afterwards
one short TCP stream per node pair measures bandwidth (pairs one after another, so they do
not share links). Every step has a timeout; a node that fails early gets the dependent checks
skipped, never a hang.
"""

from __future__ import annotations

import itertools
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from adrun.errors import UserError
from adrun.spec import ClusterSpec, Node

from .report import CHECKS, CheckReport, CheckResult, NodeReport, PairBandwidth
from .rules import (
    judge_bandwidth,
    judge_clock,
    judge_cpus,
    judge_disk,
    judge_exposure,
    judge_gpus,
    judge_memory,
    judge_ports,
    judge_python,
    judge_script,
    judge_versions,
    passed,
    skipped,
)
from ..nodes.command import node_python, node_workdir
from ..nodes.hosts import is_local_host
from ..nodes.shell import LocalShell, NodeShell, SSHShell
from ..nodes.ssh import explain_failure, open_connection
from ..nodes.transfer import Endpoint, TransferError, measure_transfer, parse_probe, probe_command

FACTS_TIMEOUT = 120.0  # importing TensorFlow on a busy node takes a while
CLOCK_TIMEOUT = 10.0
BANDWIDTH_BYTES = 8 << 20
MAX_PARALLEL = 32  # nodes probed at once; each holds one SSH connection


@dataclass
class _Probed:
    """One node after the parallel phase: its shell (None when unreachable), results, facts."""

    node: Node
    local: bool
    shell: NodeShell | None = None
    results: dict[str, CheckResult] = field(default_factory=dict)
    facts: dict[str, Any] | None = None


def run_checks(spec: ClusterSpec, script: str | Path | None = None, *,
               known_hosts: str | Path | None = None) -> CheckReport:
    """Check every node of `spec` (a ClusterSpec); `script` is the training script path as
    given to `adrun` (relative to the working directory). `known_hosts` adds a known_hosts file
    to ~/.ssh/known_hosts for the `strict` and `accept-new` host-key policies."""
    script_arg = None if script is None else str(script)
    if script_arg is not None and not Path(script_arg).is_file():
        raise UserError(f"script {script_arg} not found on this machine")
    nodes = list(spec.nodes)
    with ThreadPoolExecutor(max_workers=min(len(nodes) + 1, MAX_PARALLEL)) as pool:
        here_future = pool.submit(_reference_facts, script_arg)
        probed = list(pool.map(lambda n: _probe_node(n, script_arg, known_hosts), nodes))
    try:
        here = here_future.result()
        for item in probed:
            _judge_facts(item, here)
        usable = [p for p in probed if p.facts is not None]
        pairs = [_measure_pair(a, b) for a, b in itertools.combinations(usable, 2)]
    finally:
        for item in probed:
            if item.shell is not None:
                item.shell.close()
    for item in probed:
        item.results["bandwidth"] = judge_bandwidth(item.node.address, pairs, item.facts is not None, len(nodes))
    return CheckReport([_node_report(p) for p in probed], pairs)


def _node_report(item: _Probed) -> NodeReport:
    """Results in table order; checks that never ran because an earlier one failed are skipped."""
    results = {name: item.results.get(name, skipped("earlier check failed")) for name in CHECKS}
    return NodeReport(item.node.address, item.local, results)


def _reference_facts(script: str | None) -> dict[str, Any]:
    """This machine's facts from the launcher's interpreter, in a subprocess: launch/ never imports TF."""
    here = Node(address="localhost")  # no python, env or workdir of its own: the launcher's
    args: dict[str, Any] = {"workdir": node_workdir(here, local=True), "script": script, "ports": []}
    done = LocalShell().run(probe_command(here, "facts", args, local=True), FACTS_TIMEOUT)
    facts = parse_probe(done.stdout)
    if facts is None or "error" in facts:
        raise UserError(f"cannot probe this machine with {sys.executable}: {done.stderr.strip()[-500:]}")
    return facts


def _probe_node(node: Node, script: str | None, known_hosts: str | Path | None) -> _Probed:
    """Connect, read the clock, run the facts probe; never raises (failures become results)."""
    local = is_local_host(node.address)
    item = _Probed(node, local)
    try:
        if local:
            item.shell = LocalShell()
            item.results["ssh"] = skipped("this machine")
            item.results["host_key"] = skipped("this machine")
        else:
            if not _connect(item, known_hosts):
                return item
        item.results["clock"] = _clock(item.shell, node.address)  # type: ignore[arg-type]
        _run_facts(item, script)
    except Exception as e:  # a bug or an odd node must not hide the other nodes' results
        failing = next((n for n in CHECKS if n not in item.results), "bandwidth")
        item.results[failing] = CheckResult("fail", f"{type(e).__name__}: {e}", "report this as an adrun bug")
    return item


def _connect(item: _Probed, known_hosts: str | Path | None) -> bool:
    node = item.node
    try:
        conn = open_connection(node, known_hosts=known_hosts)
    except Exception as e:
        why = explain_failure(e, node, known_hosts=known_hosts)
        item.results[why.check] = CheckResult("fail", why.message, why.remedy)
        if why.check == "host_key":
            item.results["ssh"] = passed("reachable")
        elif isinstance(e, paramiko.AuthenticationException):  # the host key was verified first
            item.results["host_key"] = passed("known")
        return False
    item.shell = SSHShell(conn)
    user = conn.user
    item.results["ssh"] = passed(f"{user}@{node.address}:{conn.port}")
    policy = node.ssh.host_key_policy if node.ssh is not None else "strict"
    item.results["host_key"] = passed("known" if policy == "strict" else f"not verified ({policy})")
    return True


def _clock(shell: NodeShell, address: str) -> CheckResult:
    """Node time minus local time, taking the midpoint of the round trip as the local instant."""
    try:
        before, remote, after = shell.read_clock(CLOCK_TIMEOUT)
    except Exception:  # any failure to read it is the finding
        return judge_clock(None, 0.0, address)
    return judge_clock(remote - (before + after) / 2, (after - before) / 2, address)


def _run_facts(item: _Probed, script: str | None) -> None:
    node = item.node
    python = node_python(node)
    ports = list(range(node.base_port, node.base_port + node.workers + node.ps)) if node.base_port else []
    args = {"workdir": node_workdir(node, local=item.local), "script": script, "ports": ports}
    done = item.shell.run(probe_command(node, "facts", args, local=item.local), FACTS_TIMEOUT)  # type: ignore[union-attr]
    facts = parse_probe(done.stdout)
    if done.returncode != 0 or facts is None or "error" in facts:
        stderr = done.stderr if facts is None else f"{done.stderr}\n{facts.get('error', '')}"
        item.results["python"] = judge_python(node, python, done.returncode, stderr, node.address)
        return
    item.facts = facts | {"ports_checked": ports, "workdir": args["workdir"]}
    item.results["python"] = passed(f"{facts['executable']} ({facts['python']})")


def _judge_facts(item: _Probed, here: dict[str, Any]) -> None:
    facts, node, address = item.facts, item.node, item.node.address
    if facts is None:
        return
    item.results["versions"] = judge_versions(here, facts, address)
    item.results["script"] = judge_script(here["script"], facts["script"], address)
    item.results["ports"] = judge_ports(node, facts["ports_checked"], facts["ports_taken"], address)
    item.results["exposure"] = judge_exposure(facts["fence_problem"], address)
    item.results["cpus"] = judge_cpus(node, facts["cpus"], address)
    item.results["memory"] = judge_memory(node, facts["mem_total"], facts["mem_available"], address)
    item.results["gpus"] = judge_gpus(node, facts["gpus"], address)
    item.results["disk"] = judge_disk(facts["workdir"], facts["workdir_exists"], facts["disk_free"], address)


def _measure_pair(sender: _Probed, receiver: _Probed) -> PairBandwidth:
    """Stream BANDWIDTH_BYTES from `sender` to `receiver`'s address."""
    source, target = sender.node.address, receiver.node.address
    try:
        done = measure_transfer(_endpoint(sender), _endpoint(receiver), target, BANDWIDTH_BYTES)
    except TransferError as e:
        return PairBandwidth(source, target, None, str(e))
    return PairBandwidth(source, target, done.bytes_per_s * 8 / 1e6)


def _endpoint(item: _Probed) -> Endpoint:
    return Endpoint(item.node, item.shell, item.local)  # type: ignore[arg-type]
