"""ClusterSpec v1: which machines take part and which processes each one runs (YAML).

Every model forbids unknown fields, so a typo such as `wokers: 2` is an error that names the field
instead of a silently ignored line. `load_spec` reports every problem of a file at once as one
`UserError` of `<file>: <field.path>: <what is wrong>` lines.

Counts are whole numbers only (YAML's `true` is not 1, `2.0` is not 2), and every value is bounded by
what a machine can hold, so an impossible spec is refused before anything starts instead of
starting 100,000 processes or 4,096 devices. README.md, "Cluster spec", lists the bounds and why.
"""

from __future__ import annotations

import ipaddress
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any, Literal

import psutil
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from adrun.env_vars import CONTRACT_VARS, SETTING_VARS
from adrun.model_io import Loc, Problems, Version1, dump_yaml, load_yaml_model

MAX_PORT = 65535
# A spec of 2,000 nodes, each with its SSH settings written out, is about 1 MiB.
MAX_SPEC_BYTES = 2**20
# The longest name DNS can carry (RFC 1035); longer ones also break Python's resolver (IDNA).
MAX_ADDRESS_LENGTH = 253
# Each adrun process is a whole TensorFlow runtime (about 0.3-0.5 GB, its own thread pools). A PS
# mostly waits on the network and a worker on its peers, so a few processes per CPU still make
# progress; beyond that they only compete. Without `cpus`, only the per-node ceiling applies.
PROCESSES_PER_CPU = 4
MAX_PROCESSES_PER_NODE = 256
# Each in-graph replica is a copy of the training step in the worker's graph, on its own device.
MAX_REPLICAS = 64
MAX_GPUS = 64  # more than any single machine holds (8-16 is usual)
MAX_CPUS = 8192  # Linux's largest CONFIG_NR_CPUS
MAX_MEMORY_GB = 4 * 2**20  # 4 PiB: all that a 52-bit physical address space reaches

# One DNS label: letters, digits, '-' (not first or last) and '_' (found in /etc/hosts and container
# names), 1-63 characters.
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _check_env_name(name: str) -> str:
    if not name or not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name):
        raise ValueError(f"{name!r} is not a valid environment variable name (letters, digits, _)")
    return name


def _check_address(address: str) -> str:
    """A host name (ASCII, dot-separated labels, at most MAX_ADDRESS_LENGTH characters) or an IPv4 /
    IPv6 address. Checked here because the launcher resolves it, passes it to ssh and writes it into
    TF's cluster definition, and each of those fails in its own obscure way on a malformed one."""
    if len(address) > MAX_ADDRESS_LENGTH:
        raise ValueError(f"{len(address)} characters; a hostname has at most {MAX_ADDRESS_LENGTH}")
    if _is_ip(address):
        return address
    if address.startswith("[") and address.endswith("]") and _is_ip(address[1:-1]):
        raise ValueError(f"write the IPv6 address without brackets: {address[1:-1]}")
    labels = address.split(".")
    if not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueError(
            f"{address!r} is not a hostname or IP address (a hostname is dot-separated parts of 1-63 "
            "ASCII letters, digits, '-' or '_'; a non-ASCII name is written in its xn-- form)"
        )
    if labels[-1].isdigit():
        raise ValueError(f"{address!r} is not a valid IPv4 address")
    return address


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _check_text(text: str) -> str:
    """Refuse what no path, command or environment variable can hold: the operating system stops
    C strings at NUL, and a lone surrogate (YAML's "\\ud800") has no UTF-8 encoding."""
    if "\0" in text:
        raise ValueError("contains a NUL character (\\0), which no path, command or environment value can hold")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"contains {err.object[err.start]!r}, a lone UTF-16 surrogate with no UTF-8 form") from None
    return text


EnvName = Annotated[str, AfterValidator(_check_env_name)]
# YAML reads `OMP_NUM_THREADS: 4` as a number; the environment only holds text.
EnvValue = Annotated[str, Field(coerce_numbers_to_str=True), AfterValidator(_check_text)]
Text = Annotated[str, Field(min_length=1), AfterValidator(_check_text)]


def is_loopback(address: str) -> bool:
    """True for addresses that only reach this machine (`localhost`, 127.x.y.z, ::1)."""
    host = address.lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SSHConfig(BaseModel):
    """How the launcher reaches a remote node (parsed now, used by the SSH launcher)."""

    model_config = ConfigDict(extra="forbid")

    user: Text | None = None  # default: ssh's own choice (~/.ssh/config, current user)
    port: StrictInt = Field(default=22, ge=1, le=MAX_PORT)
    identity_file: Text | None = None  # private key on the launching machine
    host_key_policy: Literal["strict", "accept-new", "off"] = "strict"
    known_hosts: Text | None = None  # extra known_hosts file read (never written) besides ~/.ssh/known_hosts
    forward_env: list[EnvName] = []  # names of launcher environment variables to pass on
    workdir: Text | None = None  # directory to run in on the node; default: the same path as here
    activate: Text | None = None  # shell command run first, e.g. "source /venv/bin/activate"

    @field_validator("host_key_policy", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `off` as the boolean false.
        return "off" if value is False else value


class Node(BaseModel):
    """One machine and the adrun processes it runs."""

    model_config = ConfigDict(extra="forbid")

    address: Annotated[str, AfterValidator(_check_address)]  # hostname or IP
    chief: StrictBool = False  # exactly one node when there are several; a single node is chief implicitly
    # worker processes on this node; default: one per GPU (per `replicas` GPUs when given), else 1
    workers: StrictInt = Field(default=1, ge=0)
    ps: StrictInt = Field(default=0, ge=0)  # parameter-server processes on this node
    # CPUs of the node: bounds its processes (PROCESSES_PER_CPU); `cluster check` compares it
    cpus: StrictInt | None = Field(default=None, ge=1, le=MAX_CPUS)
    gpus: StrictInt = Field(default=0, ge=0, le=MAX_GPUS)
    # in-graph replicas per worker, one per device: GPUs when the node has any (each worker gets
    # its own), else virtual CPU devices; default: the node's GPUs shared out among its workers, or 1
    replicas: StrictInt | None = Field(default=None, ge=1)
    # informational (`cluster check` compares it)
    memory_gb: StrictFloat | None = Field(default=None, gt=0, le=MAX_MEMORY_GB, allow_inf_nan=False)
    python: Text | None = None  # interpreter on this node; default: the launcher's interpreter
    env: dict[EnvName, EnvValue] = {}  # extra environment for this node's processes
    base_port: StrictInt | None = Field(default=None, ge=1024, le=MAX_PORT)  # fixed ports from here; else free
    ssh: SSHConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_worker_per_gpu(cls, data: Any) -> Any:
        """A node with `gpus` and no `workers` runs one worker per GPU, each seeing its own GPU, as
        `horovodrun -np` and `torchrun --nproc-per-node` do and a TF2 script needs (one device per
        process); with `replicas`, one worker per that many GPUs. Invalid values are left to the
        fields' own checks."""
        if not isinstance(data, dict) or "workers" in data:
            return data
        gpus, replicas = data.get("gpus"), data.get("replicas")
        if type(gpus) is int and gpus > 0 and (replicas is None or (type(replicas) is int and replicas > 0)):
            return {**data, "workers": max(1, gpus // (replicas or 1))}
        return data

    @property
    def replicas_per_worker(self) -> int:
        if self.replicas is not None:
            return self.replicas
        return max(1, self.gpus // self.workers) if self.workers else 1

    @property
    def replica_device_type(self) -> str:
        return "GPU" if self.gpus else "CPU"

    @model_validator(mode="after")
    def _env_leaves_adruns_own_alone(self) -> Node:
        """adrun writes its contract and the job's settings into every task itself (one value per job):
        a node's copy would be dropped, so it is refused rather than silently ignored."""
        owned = [name for name in self.env if name in CONTRACT_VARS or name in SETTING_VARS]
        if owned:
            raise Problems([(("env", name), f"{name} is adrun's own variable, written into every task by adrun; "
                             + ("set it in the launcher's environment instead (one value for the whole job)"
                                if name in SETTING_VARS else "a node cannot set it")) for name in owned])
        return self

    @model_validator(mode="after")
    def _processes_fit(self) -> Node:
        processes = self.workers + self.ps
        if self.cpus is not None and PROCESSES_PER_CPU * self.cpus < MAX_PROCESSES_PER_NODE:
            limit = PROCESSES_PER_CPU * self.cpus
            why = f"a node with {self.cpus} CPU(s) runs at most {limit} ({PROCESSES_PER_CPU} per CPU)"
        else:
            limit, why = MAX_PROCESSES_PER_NODE, f"a node runs at most {MAX_PROCESSES_PER_NODE}"
        if processes > limit:
            field = "workers" if self.workers > limit else "ps"
            raise Problems([((field,), f"{self.workers} worker(s) + {self.ps} PS = {processes} processes; {why}")])
        return self

    @model_validator(mode="after")
    def _replicas_fit(self) -> Node:
        if self.replicas is None:
            return self  # the default, gpus // workers, is at most MAX_GPUS = MAX_REPLICAS
        if self.replicas > MAX_REPLICAS:
            raise Problems(
                [(("replicas",), f"{self.replicas} in-graph replicas per worker; at most {MAX_REPLICAS} "
                  "(each is a copy of the training step on a device of its own)")]
            )
        if self.gpus and self.replicas * self.workers > self.gpus:
            raise Problems(
                [(("replicas",), f"{self.replicas} replica(s) for each of {self.workers} worker(s) need "
                  f"{self.replicas * self.workers} GPUs; the node has {self.gpus}")]
            )
        return self

    @model_validator(mode="after")
    def _ports_fit(self) -> Node:
        if self.base_port is not None:
            last = self.base_port + self.workers + self.ps - 1
            if last > MAX_PORT:
                raise Problems(
                    [(("base_port",), f"{self.workers + self.ps} processes from port {self.base_port} "
                      f"would need port {last} > {MAX_PORT}")]
                )
        return self


# Bounds of the network figures a spec may give: from a slow shared uplink (1 kbit/s) to beyond any
# interconnect sold (10 Tbit/s); a latency of at most a minute (longer is a dead link, not a figure).
MIN_BANDWIDTH_MBIT = 0.001
MAX_BANDWIDTH_MBIT = 10_000_000
MAX_LATENCY_MS = 60_000


def _plain_number(value: Any) -> Any:
    """`10` and `0.5` alike, but not YAML's `true`, a quoted `'10'`, `.nan` or `.inf`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("float_type", "Input should be a number")
    if not math.isfinite(value):
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return value


Bandwidth = Annotated[float, BeforeValidator(_plain_number),
                      Field(ge=MIN_BANDWIDTH_MBIT, le=MAX_BANDWIDTH_MBIT, allow_inf_nan=False)]
Latency = Annotated[float, BeforeValidator(_plain_number), Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)]


class PathFigures(BaseModel):
    """Bandwidth (Mbit/s, 10^6 bits) and one-way latency (ms) of one path, as the user knows them."""

    model_config = ConfigDict(extra="forbid")

    bandwidth_mbit: Bandwidth
    latency_ms: Latency


class LinkFigures(PathFigures):
    """One direction between two nodes of the spec, by their addresses."""

    src: Annotated[str, AfterValidator(_check_address)]
    dst: Annotated[str, AfterValidator(_check_address)]


class NetworkSpec(BaseModel):
    """The network as given instead of measured (`adrun profile`, `--strategy Auto`).

    `bandwidth_mbit` / `latency_ms`: every path between two different nodes, and inside a node
    unless `local` says otherwise; `local`: inside one node (loopback); `links`: one direction
    between two nodes, instead of the top-level figures. Every path the cluster has must get figures.
    """

    model_config = ConfigDict(extra="forbid")

    bandwidth_mbit: Bandwidth | None = None
    latency_ms: Latency | None = None
    local: PathFigures | None = None
    links: list[LinkFigures] = []

    @model_validator(mode="after")
    def _complete(self) -> NetworkSpec:
        findings: list[tuple[Loc, str]] = []
        if (self.bandwidth_mbit is None) != (self.latency_ms is None):
            missing = "latency_ms" if self.latency_ms is None else "bandwidth_mbit"
            findings.append(((missing,), "give bandwidth_mbit and latency_ms together"))
        elif self.bandwidth_mbit is None and self.local is None:
            findings.append(((), "no figures for the path inside a node: give bandwidth_mbit and latency_ms "
                                 "(every path), or `local`"))
        seen: dict[tuple[str, str], int] = {}
        for i, link in enumerate(self.links):
            pair = (_address_key(link.src), _address_key(link.dst))
            if pair[0] == pair[1]:
                findings.append((("links", i, "dst"), f"'{link.dst}' is the link's own src; the path inside a "
                                                      "node is `local`"))
            elif pair in seen:
                findings.append((("links", i), f"{link.src} -> {link.dst} given twice (also links[{seen[pair]}])"))
            seen.setdefault(pair, i)
        if findings:
            raise Problems(findings)
        return self

    def pair_findings(self, addresses: list[str]) -> list[tuple[Loc, str]]:
        """Links naming no node of the spec, and ordered node pairs left without figures."""
        keys = [_address_key(a) for a in addresses]
        findings: list[tuple[Loc, str]] = [
            (("links", i, end), f"'{getattr(link, end)}' is not the address of a node of this spec")
            for i, link in enumerate(self.links) for end in ("src", "dst")
            if _address_key(getattr(link, end)) not in keys
        ]
        if self.bandwidth_mbit is None:
            given = {(_address_key(link.src), _address_key(link.dst)) for link in self.links}
            missing = [f"{a} -> {b}" for a, ka in zip(addresses, keys, strict=True) for b, kb in zip(addresses, keys, strict=True)
                       if ka != kb and (ka, kb) not in given]
            if missing:
                shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                findings.append(((), f"no figures for {shown}: give bandwidth_mbit and latency_ms for every "
                                     "path between nodes, or a `links` entry for each"))
        return findings

    def figures(self, src: str, dst: str) -> PathFigures:
        """The figures of the path from node `src` to node `dst` (`local` when they are one node)."""
        key = (_address_key(src), _address_key(dst))
        if key[0] == key[1]:
            if self.local is not None:
                return self.local
        else:
            for link in self.links:
                if (_address_key(link.src), _address_key(link.dst)) == key:
                    return link
        assert self.bandwidth_mbit is not None and self.latency_ms is not None  # _complete and pair_findings
        return PathFigures(bandwidth_mbit=self.bandwidth_mbit, latency_ms=self.latency_ms)


class ClusterSpec(BaseModel):
    """The whole cluster: a list of nodes, one of them the chief."""

    model_config = ConfigDict(extra="forbid")

    version: Version1
    nodes: list[Node] = Field(min_length=1)
    network: NetworkSpec | None = None  # given figures; without, `adrun profile` measures the network

    @model_validator(mode="after")
    def _check_nodes(self) -> ClusterSpec:
        findings: list[tuple[Loc, str]] = []
        if self.num_workers < 1:
            findings.append((("nodes",), "no worker process in the whole cluster; set `workers: 1` or more on a node"))
        first_seen: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            key = _address_key(node.address)
            if key in first_seen:
                findings.append(
                    (("nodes", i, "address"), f"duplicate address '{node.address}' (also nodes[{first_seen[key]}])")
                )
            first_seen.setdefault(key, i)
        if len(self.nodes) > 1:
            findings += self._multi_node_findings()
        if self.network is not None:
            findings += [(("network", *loc), message)
                         for loc, message in self.network.pair_findings([node.address for node in self.nodes])]
        if findings:
            raise Problems(findings)
        return self

    def _multi_node_findings(self) -> list[tuple[Loc, str]]:
        findings: list[tuple[Loc, str]] = [
            (
                ("nodes", i, "address"),
                f"'{node.address}' reaches only the machine it runs on; "
                "a spec with several nodes needs addresses every node can reach",
            )
            for i, node in enumerate(self.nodes)
            if is_loopback(node.address)
        ]
        chiefs = [i for i, node in enumerate(self.nodes) if node.chief]
        if not chiefs:
            findings.append((("nodes",), "no node has `chief: true`; with several nodes mark exactly one"))
        elif len(chiefs) > 1:
            marked = ", ".join(f"nodes[{i}]" for i in chiefs)
            findings.append((("nodes",), f"{len(chiefs)} nodes have `chief: true` ({marked}); mark exactly one"))
        return findings

    @property
    def chief(self) -> Node:
        """The chief node: the one marked `chief: true`, or the only node."""
        return next((node for node in self.nodes if node.chief), self.nodes[0])

    @property
    def num_workers(self) -> int:
        return sum(node.workers for node in self.nodes)

    @property
    def num_ps(self) -> int:
        return sum(node.ps for node in self.nodes)


def _address_key(address: str) -> str:
    """The same for two spellings of one address: host names differ only in case, and an IPv6
    address has several (`::1`, `0:0::1`)."""
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        return address.lower()


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster spec; every problem is reported in one `UserError`."""
    return load_yaml_model(path, ClusterSpec, MAX_SPEC_BYTES)


def spec_to_yaml(spec: ClusterSpec) -> str:
    """The spec as YAML that `load_spec` reads back to an equal spec.

    adrun itself never writes a spec; the tests use this to write the specs they build, which
    checks the round trip of every field they use."""
    return dump_yaml(spec.model_dump(mode="json", exclude_none=True))


def default_local_spec() -> ClusterSpec:
    """This machine as a small cluster, for `adrun train.py` without --spec: 1 PS and 2 worker
    processes, or one worker per GPU when nvidia-smi lists GPUs."""
    gpus = _visible_gpus()
    node = Node(
        address="localhost", chief=True, workers=gpus or 2, ps=1, cpus=_usable_cpus(),
        gpus=gpus, memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
    )
    return ClusterSpec(version=1, nodes=[node])


def _visible_gpus() -> int:
    """NVIDIA GPUs nvidia-smi lists (0 without the tool or a driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU ")) if listing.returncode == 0 else 0


def _usable_cpus() -> int | None:
    """CPUs this process may run on (respects taskset/container limits where the OS reports them)."""
    process = psutil.Process()
    if hasattr(process, "cpu_affinity"):
        return len(process.cpu_affinity()) or None
    return psutil.cpu_count()
