"""Several "hosts" on one machine: Linux network namespaces on a bridge, each running its own sshd.

Why: multi-node code (SSH launch, `adrun cluster check`) must be tested against real separate
network stacks and real SSH servers, not against localhost, where every address is the same
machine and a wrong address still works. The file system stays shared, so the venv and the
repository exist at the same paths on every host, as the launcher expects of real clusters.

Layout for a cluster with id `abc123` on subnet 10.77.X.0/24:

    root namespace: bridge `adrbr-abc123` with 10.77.X.1
    host i (1..N):  namespace `adrun-h<i>-abc123`, `eth0` = 10.77.X.(10+i), lo up,
                    veth peer `adrabc123h<i>` enslaved to the bridge,
                    `sshd -D` listening on 10.77.X.(10+i):22 (key-only root login)

Only addresses inside this subnet are used and no default route is added, so nothing started
on a host can reach anything else. Hosts talk to each other and to the root namespace over the
bridge (one L2 segment), so no forwarding or firewall change is needed. `close()` removes
everything `start()` created, also after a partial start, and is safe to call twice.
"""

from __future__ import annotations

import ipaddress
import math
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SSHD = Path("/usr/sbin/sshd")
SUBNET_PREFIX = "10.77"
SSHD_READY_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0
COMMAND_TIMEOUT = 30.0
BURST_S = 0.002  # token bucket size of shape(), in seconds of the rate
QUEUE_MS = 50  # what shape()'s token bucket queues before it drops (tc tbf's `latency`)


def bucket_bytes(rate_mbit: float) -> int:
    """The token bucket `NetnsCluster.shape` gives a link of `rate_mbit`: 2 ms of the rate, at least
    64 KiB (tc's `kb` is KiB)."""
    return 1024 * max(64, math.ceil(rate_mbit * 1e6 / 8 * BURST_S / 1024))


def queue_bytes(rate_mbit: float) -> int:
    """What `NetnsCluster.shape`'s token bucket holds queued before it drops: tc tbf's limit for a
    `latency` of QUEUE_MS, the rate times that latency plus the bucket."""
    return round(rate_mbit * 1e6 / 8 * QUEUE_MS / 1000) + bucket_bytes(rate_mbit)


def missing_requirements() -> str | None:
    """Why a namespace cluster cannot be built here, or None when it can."""
    if os.geteuid() != 0:
        return "network-namespace cluster needs root (ip netns, veth, bridge)"
    for tool in ("ip", "tc", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found: run tests/cluster/install-deps.sh (iproute2, openssh-client)"
    if not SSHD.exists():
        return f"{SSHD} not found: run tests/cluster/install-deps.sh (openssh-server)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a setup command; a failure raises with its stderr, so a broken setup says why."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@dataclass
class NetnsHost:
    """One simulated machine: a namespace, its address, and its sshd."""

    index: int
    netns: str
    address: str
    veth: str  # root-namespace end of the veth pair, a port of the bridge
    dir: Path  # this host's sshd config, host key, pid file and log
    sshd: subprocess.Popen[bytes] | None = None

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def sshd_log(self) -> Path:
        return self.dir / "sshd.log"

    def exec_argv(self, *argv: str) -> list[str]:
        """`argv` run inside this host's network namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass
class NetnsCluster:
    """N hosts on a private bridge; use as a context manager or call start()/close()."""

    n_hosts: int
    id: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: list[NetnsHost] = field(default_factory=list)
    dir: Path | None = None
    subnet: str = ""
    _undo: list[list[str]] = field(default_factory=list)  # commands removing what was made, in order made

    def __post_init__(self) -> None:
        if not 1 <= self.n_hosts <= 200:
            raise ValueError(f"n_hosts must be 1..200, not {self.n_hosts}")

    # -- names and files ------------------------------------------------------------------
    @property
    def bridge(self) -> str:
        return f"adrbr-{self.id}"  # 12 characters: interface names are limited to 15

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge."""
        return f"{self.subnet}.1"

    @property
    def client_key(self) -> Path:
        assert self.dir is not None
        return self.dir / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        assert self.dir is not None
        return self.dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        assert self.dir is not None
        return self.dir / "ssh_config"

    def ssh_argv(self, host: NetnsHost, *command: str) -> list[str]:
        """`ssh` from the root namespace to `host`, key-only, host key checked, never prompting."""
        return ["ssh", "-F", str(self.ssh_config), f"root@{host.address}", *command]

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> NetnsCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> NetnsCluster:
        """Create bridge, namespaces, keys and sshds; on error the caller still calls close()."""
        self.dir = Path(tempfile.mkdtemp(prefix=f"adrun-cluster-{self.id}-"))
        self.subnet = _free_subnet()
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._undo.append(["ip", "link", "del", self.bridge])
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"adrun-test-{self.id}", "-f", str(self.client_key))
        (self.dir / "authorized_keys").write_text(self.client_key.with_suffix(".pub").read_text())
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        for i in range(1, self.n_hosts + 1):
            self._add_host(i)
        for host in self.hosts:
            self.start_sshd(host)
        self._write_client_files()
        for host in self.hosts:
            self.wait_sshd(host)
        return self

    def _add_host(self, i: int) -> None:
        assert self.dir is not None
        host = NetnsHost(i, f"adrun-h{i}-{self.id}", f"{self.subnet}.{10 + i}", f"adr{self.id}h{i}", self.dir / f"h{i}")
        host.dir.mkdir()
        self.hosts.append(host)
        _run("ip", "netns", "add", host.netns)
        self._undo.append(["ip", "netns", "del", host.netns])
        _run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        # Deleting one end removes the pair at once; the netns' own cleanup would do it later.
        self._undo.append(["ip", "link", "del", host.veth])
        _run("ip", "link", "set", host.veth, "master", self.bridge, "up")
        _run(*host.exec_argv("ip", "link", "set", "lo", "up"))
        _run(*host.exec_argv("ip", "addr", "add", f"{host.address}/24", "dev", "eth0"))
        _run(*host.exec_argv("ip", "link", "set", "eth0", "up"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.netns, "-f", str(host.host_key))
        host.sshd_config.write_text(self._sshd_config_text(host))

    def _sshd_config_text(self, host: NetnsHost) -> str:
        assert self.dir is not None
        return "\n".join([
            f"ListenAddress {host.address}",
            "Port 22",
            f"HostKey {host.host_key}",
            f"PidFile {host.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",  # the key files live in a temp dir, not in ~root/.ssh
            "PrintMotd no",
            "MaxStartups 100",  # parallel checks must not be throttled as a connection flood
            "MaxSessions 50",
            "Subsystem sftp internal-sftp",
            "",
        ])

    def _write_client_files(self) -> None:
        lines = [f"{h.address} {' '.join(h.host_key.with_suffix('.pub').read_text().split()[:2])}" for h in self.hosts]
        self.known_hosts.write_text("\n".join(lines) + "\n")
        self.ssh_config.write_text("\n".join([
            f"Host {self.subnet}.*",
            "  User root",
            f"  IdentityFile {self.client_key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.known_hosts}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  ConnectTimeout 10",
            "  LogLevel ERROR",
            "",
        ]))

    def start_sshd(self, host: NetnsHost) -> None:
        """Start (or restart) the host's sshd in the foreground (`-D`), logging to its dir."""
        if host.sshd is not None and host.sshd.poll() is None:
            return
        with host.sshd_log.open("ab") as log:
            # `ip netns exec` execs sshd in place, so this pid is sshd's own.
            host.sshd = subprocess.Popen(
                host.exec_argv(str(SSHD), "-D", "-e", "-f", str(host.sshd_config)),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )

    def wait_sshd(self, host: NetnsHost) -> None:
        """Block until the host's sshd accepts TCP connections (bounded)."""
        deadline = time.monotonic() + SSHD_READY_TIMEOUT
        while time.monotonic() < deadline:
            if host.sshd is None or host.sshd.poll() is not None:
                raise RuntimeError(f"sshd on {host.netns} exited: {host.sshd_log.read_text()[-2000:]}")
            try:
                with socket.create_connection((host.address, 22), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"sshd on {host.address} not listening after {SSHD_READY_TIMEOUT:.0f} s")

    def stop_sshd(self, host: NetnsHost) -> None:
        """Stop the host's sshd with its sessions, deepest processes first, so each is reaped by
        its own parent: orphans would linger as zombies until init gets round to them."""
        if host.sshd is None:
            return
        for level in reversed(_descendants_by_depth(host.sshd.pid)):
            _signal_and_wait(level)
        host.sshd.terminate()
        try:
            host.sshd.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            host.sshd.kill()
            host.sshd.wait(timeout=STOP_TIMEOUT)
        host.sshd = None

    def shape(self, host: NetnsHost, rate_mbit: float) -> None:
        """Limit the host's link to `rate_mbit` in both directions (token bucket on each veth end).

        The bucket holds 2 ms of the rate (at least 64 KiB): a fixed 64 KiB bucket let a
        1 Gbit/s link carry only ~520 Mbit/s here, as the kernel refills it too seldom."""
        qdisc = ["root", "tbf", "rate", f"{rate_mbit}mbit", "burst", f"{bucket_bytes(rate_mbit) // 1024}kb",
                 "latency", f"{QUEUE_MS}ms"]
        _run("tc", "qdisc", "replace", "dev", host.veth, *qdisc)
        _run(*host.exec_argv("tc", "qdisc", "replace", "dev", "eth0", *qdisc))

    def unshape(self, host: NetnsHost) -> None:
        """Remove the shaping of `shape()` (no-op when none is set)."""
        _run("tc", "qdisc", "del", "dev", host.veth, "root", check=False)
        _run(*host.exec_argv("tc", "qdisc", "del", "dev", "eth0", "root"), check=False)

    def close(self) -> None:
        """Remove every process, namespace, link and file this cluster made; errors are collected."""
        errors: list[str] = []

        def attempt(what: str, fn, *args) -> None:  # type: ignore[no-untyped-def]
            try:
                fn(*args)
            except Exception as e:  # keep tearing down the rest
                errors.append(f"{what}: {e}")

        for host in self.hosts:
            attempt(f"stop sshd on {host.netns}", self.stop_sshd, host)
            attempt(f"stop processes in {host.netns}", _stop_netns_processes, host.netns)
        while self._undo:
            argv = self._undo.pop()
            attempt(" ".join(argv), _run, *argv)
        if self.dir is not None:
            attempt(f"remove {self.dir}", shutil.rmtree, self.dir)
            self.dir = None
        self.hosts.clear()
        if errors:
            raise RuntimeError("namespace cluster teardown: " + "; ".join(errors))


def _free_subnet() -> str:
    """A 10.77.X prefix no interface of this machine uses (so two clusters never overlap)."""
    used = {
        a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET
    }
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for x in candidates:
        net = ipaddress.ip_network(f"{SUBNET_PREFIX}.{x}.0/24")
        if not any(ipaddress.ip_address(a) in net for a in used):
            return f"{SUBNET_PREFIX}.{x}"
    raise RuntimeError(f"every {SUBNET_PREFIX}.X.0/24 subnet is in use")


def _stop_netns_processes(netns: str) -> None:
    """End what still runs inside the namespace (test listeners, stray sessions): all were started
    by this cluster or through its sshd, and the namespace cannot be reused while they live."""
    procs = []
    for pid in _run("ip", "netns", "pids", netns, check=False).stdout.split():
        try:
            procs.append(psutil.Process(int(pid)))
        except psutil.NoSuchProcess:
            pass
    _signal_and_wait(procs)


def _descendants_by_depth(pid: int) -> list[list[psutil.Process]]:
    """Children of `pid`, then grandchildren, ... (empty when `pid` is gone)."""
    levels: list[list[psutil.Process]] = []
    try:
        level = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return levels
    while level and len(levels) < 10:  # sshd session trees are 2-3 deep
        levels.append(level)
        nxt = []
        for proc in level:
            try:
                nxt += proc.children()
            except psutil.NoSuchProcess:
                pass
        level = nxt
    return levels


def _signal_and_wait(procs: list[psutil.Process]) -> None:
    """SIGTERM, then SIGKILL to what is left after STOP_TIMEOUT, waiting until each process is
    reaped; a zombie whose parent is init (which may reap late) counts as ended. Bounded waits."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if not _ended(p)]
        for proc in alive:
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(not _ended(p) for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)


def _ended(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() == 1
    except psutil.NoSuchProcess:
        return True


def two_host_spec(path: Path, cluster: NetnsCluster, ps: tuple[int, int] = (1, 0), h2: dict | None = None,
                  replicas: tuple[int, int] = (1, 1), forward_env: tuple[str, ...] = ()) -> Path:
    """1 worker on each of the first two hosts, `ps[i]` PS and `replicas[i]` in-graph replicas on
    host i; `h2` adds ssh fields to host 2; both hosts get the launcher's `forward_env` variables."""
    lines = ["version: 1", "nodes:"]
    for i, host in enumerate(cluster.hosts[:2]):
        ssh = {"user": "root", "identity_file": str(cluster.client_key), "known_hosts": str(cluster.known_hosts),
               **({"forward_env": f"[{', '.join(forward_env)}]"} if forward_env else {}),
               **((h2 or {}) if i == 1 else {})}
        lines += [f"  - address: {host.address}", f"    chief: {'true' if i == 0 else 'false'}",
                  "    workers: 1", f"    ps: {ps[i]}", f"    replicas: {replicas[i]}", "    ssh:"]
        lines += [f"      {key}: {value}" for key, value in ssh.items()]
    path.write_text("\n".join(lines) + "\n")
    return path
