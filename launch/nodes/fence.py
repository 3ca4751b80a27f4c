"""A job's packet filter on one node: its TF ports refuse every host but the job's own nodes,
for exactly as long as a holder process lives.

Why: TF's gRPC servers listen on every interface, with no authentication, and run any graph
they are sent (TF's SECURITY.md): without a filter, anyone who can reach the node can run code
as the job's user for the job's lifetime.

How: one nftables table per job attempt and node, `flags owner`. The kernel removes such a table
when the netlink socket that created it closes, that is when the `nft -i` process that made it
exits, however it exits: its stdin closed (the job's teardown, or the death of whoever holds the
other end of the pipe: a launcher killed with SIGKILL, a remote keeper whose lease ran out), or
its own death. So no rule outlives its job, and nothing has to find stale rules later. In the
table's chain, loopback and the job's other nodes pass, and a TCP connection to the job's ports
from anywhere else gets a reset (refused at once rather than left to time out). The table only
adds a refusal: rules of other tables still apply as before.

Standard library only: it runs on the nodes inside `remote_agent.py` (shipped with it by
`command.shipped_source`) and in the launcher for this machine; the same code everywhere.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence

TABLE_PREFIX = "adrun_"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
_SBIN = "/usr/sbin:/sbin"  # where Debian puts nft, often missing from a user's PATH


class FenceError(Exception):
    """No rule could be installed: why, as one line naming what to do."""


def table_name(job_id: str, attempt: int) -> str:
    """The job attempt's table: `adrun_<job id>_a<attempt>`, characters nft does not take as `_`."""
    return f"{TABLE_PREFIX}{re.sub(r'[^A-Za-z0-9_]', '_', job_id)}_a{attempt}"


def rule_commands(table: str, ports: Sequence[int], peers: Sequence[str]) -> list[str]:
    """The `nft` commands making `table`: TCP `ports` refuse connections that come neither over
    loopback (this machine itself) nor from one of `peers` (IP addresses of the job's other nodes).

    Every value is checked (ValueError), since the commands are nft's language: a table name of
    word characters, ports in 1..65535, peers IP literals.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", table):
        raise ValueError(f"not an nft table name: {table!r}")
    if not ports or any(not 0 < int(port) < 65536 for port in ports):
        raise ValueError(f"ports must be 1..65535: {list(ports)}")
    addresses = [ipaddress.ip_address(peer) for peer in peers]
    chain = f"inet {table} input"
    commands = [
        f"add table inet {table} {{ flags owner; }}",
        f"add chain {chain} {{ type filter hook input priority filter - 10; policy accept; }}",
        f'add rule {chain} iifname "lo" accept',
    ]
    for family, version in (("ip", 4), ("ip6", 6)):
        chosen = sorted({str(a) for a in addresses if a.version == version})
        if chosen:
            commands.append(f"add rule {chain} {family} saddr {{ {', '.join(chosen)} }} accept")
    commands.append(f"add rule {chain} tcp dport {{ {', '.join(str(int(p)) for p in sorted(set(ports)))} }} "
                    "reject with tcp reset")
    return commands


def nft_path() -> str | None:
    """The `nft` program, looked for on PATH and in /usr/sbin, /sbin."""
    return shutil.which("nft", path=os.pathsep.join(p for p in (os.environ.get("PATH", ""), _SBIN) if p))


class Fence:
    """The rule of one job attempt on this machine, alive until `close` (or this process's end)."""

    def __init__(self, table: str, ports: Sequence[int], peers: Sequence[str]) -> None:
        """Install the rule and return once the kernel has it; FenceError saying why not."""
        commands = rule_commands(table, ports, peers)
        nft = nft_path()
        if nft is None:
            raise FenceError("nft (nftables) is not installed: on Debian, apt-get install nftables")
        self.table = table
        self._listed = threading.Event()
        self._listing: list[str] = []
        self._errors: list[str] = []
        # stdin is the rule's life: nothing else holds the pipe's write end (close_fds), so the
        # pipe closes exactly when this process closes it or dies
        self._proc = subprocess.Popen([nft, "-i"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write("\n".join([*commands, f"list table inet {table}"]) + "\n")
            self._proc.stdin.flush()
        except OSError:
            pass  # nft already ended: its stderr says why
        if not self._wait_listed():
            self.close()
            raise FenceError(self._why_not())

    def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._listing.append(line.strip())
            if line.rstrip("\n") == "}":  # the end of `list table`: everything before it was applied
                self._listed.set()

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            if line.strip():
                self._errors.append(line.strip())

    def _wait_listed(self) -> bool:
        """True when the table was listed back with no error before it; bounded by START_TIMEOUT_S."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and not self._listed.is_set():
            if self._errors or self._proc.poll() is not None:
                return False
            self._listed.wait(0.05)
        # the refusal listed back is the proof (an error's line may still be on its way)
        return self._listed.is_set() and not self._errors and any("reject" in line for line in self._listing)

    def _why_not(self) -> str:
        error = next((line for line in self._errors if line.startswith("Error:")), None) or \
            (self._errors[0] if self._errors else f"no answer from nft in {START_TIMEOUT_S:.0f} s")
        if "Operation not permitted" in error and os.geteuid() != 0:
            return f"nft: {error} (adrun runs as uid {os.geteuid()}: packet-filter rules need root)"
        return f"nft: {error}"

    @property
    def alive(self) -> bool:
        """Whether the rule still holds (its nft process runs)."""
        return self._proc.poll() is None

    def close(self) -> None:
        """Remove the rule: close nft's stdin, so it exits and the kernel drops its table; killed
        if it has not exited after STOP_TIMEOUT_S (its death drops the table all the same)."""
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(STOP_TIMEOUT_S)


def fence_problem() -> str | None:
    """Why no rule can be installed on this machine now, or None when one can: installs a
    throw-away rule and removes it again (what `cluster check` asks every node)."""
    try:
        Fence(f"{TABLE_PREFIX}check_{os.getpid()}", [9], []).close()
    except FenceError as e:
        return str(e)
    except OSError as e:
        return f"nft cannot be started: {e.strerror or e}"
    return None
