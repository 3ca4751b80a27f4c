"""ClusterSpec v1: which machines take part and which processes each one runs (YAML).

Every model forbids unknown fields, so a typo such as `wokers: 2` is an error that names the field
instead of a silently ignored line. `load_spec` reports every problem of a file at once as one
`UserError` of `<file>: <field.path>: <what is wrong>` lines.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any, Literal

import psutil
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from adrun.model_io import Loc, Problems, dump_yaml, load_yaml_model

MAX_PORT = 65535


def _check_env_name(name: str) -> str:
    if not name or not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name):
        raise ValueError(f"'{name}' is not a valid environment variable name (letters, digits, _)")
    return name


def _check_address(address: str) -> str:
    if not address or any(c.isspace() for c in address):
        raise ValueError(f"'{address}' is not a hostname or IP address")
    return address


EnvName = Annotated[str, AfterValidator(_check_env_name)]
# YAML reads `OMP_NUM_THREADS: 4` as a number; the environment only holds text.
EnvValue = Annotated[str, Field(coerce_numbers_to_str=True)]
Text = Annotated[str, Field(min_length=1)]


def is_loopback(address: str) -> bool:
    """True for addresses that only reach this machine (`localhost`, 127.x.y.z, ::1)."""
    host = address.strip("[]").lower()
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
    port: int = Field(default=22, ge=1, le=MAX_PORT)
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
    chief: bool = False  # exactly one node when there are several; a single node is chief implicitly
    workers: int = Field(default=1, ge=0)  # worker processes on this node
    ps: int = Field(default=0, ge=0)  # parameter-server processes on this node
    cpus: int | None = Field(default=None, ge=1)  # informational
    gpus: int = Field(default=0, ge=0)
    # in-graph replicas per worker, one per device: GPUs when the node has any (each worker gets
    # its own), else virtual CPU devices; default: the node's GPUs shared out among its workers, or 1
    replicas: int | None = Field(default=None, ge=1)
    memory_gb: float | None = Field(default=None, gt=0)  # informational
    python: Text | None = None  # interpreter on this node; default: the launcher's interpreter
    env: dict[EnvName, EnvValue] = {}  # extra environment for this node's processes
    base_port: int | None = Field(default=None, ge=1024, le=MAX_PORT)  # fixed ports from here; else free
    ssh: SSHConfig | None = None

    @property
    def replicas_per_worker(self) -> int:
        if self.replicas is not None:
            return self.replicas
        return max(1, self.gpus // self.workers) if self.workers else 1

    @property
    def replica_device_type(self) -> str:
        return "GPU" if self.gpus else "CPU"

    @model_validator(mode="after")
    def _gpus_suffice(self) -> Node:
        if self.gpus and self.replicas is not None and self.replicas * self.workers > self.gpus:
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


class ClusterSpec(BaseModel):
    """The whole cluster: a list of nodes, one of them the chief."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    nodes: list[Node] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_nodes(self) -> ClusterSpec:
        findings: list[tuple[Loc, str]] = []
        if self.num_workers < 1:
            findings.append((("nodes",), "no worker process in the whole cluster; set `workers: 1` or more on a node"))
        first_seen: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            key = node.address.lower()
            if key in first_seen:
                findings.append(
                    (("nodes", i, "address"), f"duplicate address '{node.address}' (also nodes[{first_seen[key]}])")
                )
            first_seen.setdefault(key, i)
        if len(self.nodes) > 1:
            findings += self._multi_node_findings()
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

    def worker_node_order(self) -> list[int]:
        """Positions of the nodes in the order their workers get task indices: the chief node
        first (worker 0 is the chief), then the others in spec order."""
        chief = next(i for i, node in enumerate(self.nodes) if node is self.chief)
        return [chief] + [i for i in range(len(self.nodes)) if i != chief]

    def replica_devices(self) -> list[list[str]]:
        """By worker task index: the local devices of that worker's in-graph replicas
        (`GPU:0`.. of the GPUs the launcher makes visible to it, or virtual `CPU:0`..)."""
        devices = []
        for pos in self.worker_node_order():
            node = self.nodes[pos]
            devices += [[f"{node.replica_device_type}:{k}" for k in range(node.replicas_per_worker)]] * node.workers
        return devices

    @property
    def num_workers(self) -> int:
        return sum(node.workers for node in self.nodes)

    @property
    def num_ps(self) -> int:
        return sum(node.ps for node in self.nodes)


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster spec; every problem is reported in one `UserError`."""
    return load_yaml_model(path, ClusterSpec)


def spec_to_yaml(spec: ClusterSpec) -> str:
    """The spec as YAML that `load_spec` reads back to an equal spec (for `--dry-run` output)."""
    return dump_yaml(spec.model_dump(mode="json", exclude_none=True))


def default_local_spec() -> ClusterSpec:
    """This machine as a small cluster: 2 worker processes and 1 PS, for `adrun train.py` without --spec."""
    node = Node(
        address="localhost", chief=True, workers=2, ps=1, cpus=_usable_cpus(),
        gpus=_visible_gpus(), memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
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
