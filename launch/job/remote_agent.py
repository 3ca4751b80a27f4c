"""The program adrun runs on a remote node for a job: a task's keeper, and small job-time probes.

Why a separate file with only the standard library: like `probe.py`, its source is sent over
SSH and run as `python -c SOURCE MODE ARGS_JSON` with the node's interpreter
(`adrun.launch.nodes.command`, with `node_tools.py` carried along), so it depends on nothing but
Python. Modes print one line `@@ADRUN-AGENT {json}`, except `run`.

Modes:
  run                     keep one task (its spec arrives as the first stdin line, see `run`)
  prepare {"ports": {"base": int|None, "count": int}, "files": [path, ...], "private_dir"?: path}
                          free ports (or which of base..base+count-1 are taken), sha256 of files
                          (None when missing), network byte counters; `private_dir` made the
                          user's alone (`node_tools.private_dir`: None, or why it cannot be)
  netio   {}              network byte counters: {"sent", "recv"} over all interfaces but lo
  sweep   {"job_id"}      SIGKILL every process whose environment says ADRUN_JOB_ID=job_id
  fence   {"table", "ports", "peers", "lease_s"}
                          hold the job's packet-filter rule on this node (`hold_fence`) while
                          the launcher's pings keep coming, as a keeper holds its task

`run` is why remote tasks cannot outlive the launcher: the task runs in its own session (so its
whole process group can be signalled), and the keeper kills that group when its stdin (the SSH
channel) reaches EOF, when its parent (the sshd session) dies, or when the launcher's pings stop
for longer than the lease (a network cut that neither side's TCP notices). Commands on stdin:
`TERM` / `KILL` signal the group, `PING` renews the lease, `RELEASE` writes a line on the task's
release pipe (the finish barrier, adrun/runtime/finish.py), which the keeper makes when the spec
names the variable to tell the task its descriptor in (`release_var`). stdout/stderr are the task's own
(inherited, not relayed); the keeper adds `@@ADRUN-STARTED {"pid"}` and `@@ADRUN-EXIT
{"returncode"}` (negative: killed by that signal) on stderr, and exits once the group is empty.

The other direction: every `beat_s` the keeper writes HEARTBEAT on stderr, so the launcher hears
from the node even while the task is silent, and ends the job when it hears nothing for its lease
(`SILENCE_S` in launch/job/remote.py). HEARTBEAT has no newline and is written with one `write` (shorter
than PIPE_BUF, so never split by the task's own writes to the same pipe): wherever it lands, even
inside a line the task has half written, the launcher takes it out and the task's bytes are
exactly as written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from ..nodes import fence, node_tools

MARKER = "@@ADRUN-AGENT "
STARTED_MARKER = "@@ADRUN-STARTED "
EXIT_MARKER = "@@ADRUN-EXIT "
HEARTBEAT = b"\x1e@@ADRUN-ALIVE\x1e"  # 0x1e (record separator): bytes no text output contains
NO_ADRUN = 127  # `run`: adrun is not importable with this interpreter, so the hook cannot load
_POLL_S = 0.05
_GRACE_S = 2.0  # keeper on its own (launcher gone): SIGTERM, then SIGKILL after this


# --- run -------------------------------------------------------------------------------------


class _Lease:
    """The launcher's hold on a program of the job on this node (a task's keeper, the job's
    fence): lost, with the reason in `lost`, when stdin (the SSH channel) reaches EOF, the parent
    (the sshd session) dies, the launcher's pings stop for longer than `lease_s` (a network cut
    that neither side's TCP notices), or SIGHUP/SIGTERM/SIGINT arrives."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self.last_ping = time.monotonic()
        self.lost: str | None = None
        self.parent = os.getppid()
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.lost = self.lost or f"signal {signum}"

    def listen(self, obey: Callable[[str], None]) -> None:
        """Start a thread reading the launcher's words: PING renews the lease, others go to `obey`."""

        def read() -> None:
            for line in sys.stdin:
                word = line.strip()
                if word == "PING":
                    self.last_ping = time.monotonic()
                elif word:
                    obey(word)
            self.lost = self.lost or "stdin closed"

        threading.Thread(target=read, daemon=True).start()

    def check(self) -> str | None:
        """Why the launcher's hold is lost, or None while it holds."""
        if self.lost is None and os.getppid() != self.parent:
            self.lost = "parent died"
        if self.lost is None and time.monotonic() - self.last_ping > self.lease_s:
            self.lost = "lease expired"
        return self.lost


class _Keeper:
    """One task and its process group; every wait is bounded, nothing blocks on the launcher."""

    def __init__(self, spec: dict) -> None:
        self.lease = _Lease(float(spec.get("lease_s", 30)))
        self.beat_s = float(spec.get("beat_s", 1))
        env = dict(os.environ)
        env.update(spec["env"])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_hook_dir(), env.get("PYTHONPATH", "")) if p)
        self.release_write: int | None = None
        fds: tuple[int, ...] = ()
        if spec.get("release_var"):
            release_read, self.release_write = os.pipe()
            env[spec["release_var"]] = str(release_read)
            fds = (release_read,)
        try:
            self.child = subprocess.Popen(spec["argv"], env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                                          pass_fds=fds)
        except OSError as e:
            sys.stderr.write(f"adrun: cannot start {spec['argv'][0]} on {socket.gethostname()}: {e.strerror}\n")
            sys.exit(NO_ADRUN)
        finally:
            for fd in fds:
                os.close(fd)
        _say(STARTED_MARKER, {"pid": self.child.pid})

    def obey(self, word: str) -> None:
        """The launcher's TERM or KILL, for the task's whole group; its RELEASE, for the task."""
        if word == "TERM":
            node_tools.signal_group(self.child.pid, signal.SIGTERM)
        elif word == "KILL":
            node_tools.signal_group(self.child.pid, signal.SIGKILL)
        elif word == "RELEASE" and self.release_write is not None:
            try:
                os.write(self.release_write, b"release\n")
            except OSError:  # the task has gone: nobody waits
                pass
            os.close(self.release_write)
            self.release_write = None

    def beat(self) -> None:
        """Thread: tell the launcher the node and this keeper are alive (see HEARTBEAT)."""
        while True:
            try:
                os.write(2, HEARTBEAT)
            except OSError:  # the channel is gone; the lease or EOF ends the task
                return
            time.sleep(self.beat_s)

    def run(self) -> int:
        reported = False
        lost_at: float | None = None
        while True:
            code = self.child.poll()
            if code is not None and not reported:
                _say(EXIT_MARKER, {"returncode": code})
                reported = True
            if code is not None and not node_tools.group_alive(self.child.pid):
                return 0
            if self.lease.check() is not None:
                if lost_at is None:
                    lost_at = time.monotonic()
                    node_tools.signal_group(self.child.pid, signal.SIGTERM)
                elif time.monotonic() - lost_at > _GRACE_S:
                    node_tools.signal_group(self.child.pid, signal.SIGKILL)
            time.sleep(_POLL_S)


def _hook_dir() -> str:
    """adrun's sitecustomize directory in this node's installation (not the launcher's path)."""
    found = importlib.util.find_spec("adrun")
    if found is None or not found.submodule_search_locations:
        sys.stderr.write(f"adrun: adrun is not installed for {sys.executable} on {socket.gethostname()}\n")
        sys.exit(NO_ADRUN)
    return os.path.join(list(found.submodule_search_locations)[0], "hook")


def run() -> int:
    """Read the task spec {"argv", "env", "lease_s", "beat_s"} from stdin, run it, keep it in check."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a dead channel must not kill the keeper first
    keeper = _Keeper(json.loads(sys.stdin.readline()))
    keeper.lease.listen(keeper.obey)
    threading.Thread(target=keeper.beat, daemon=True).start()
    return keeper.run()


def hold_fence(args: dict) -> int:
    """Install the job's rule on this node ({"table", "ports", "peers", "lease_s"}: `fence.Fence`),
    say so (`MARKER {"table"}`, or `{"error"}` and exit 1), and hold it while the launcher's
    lease holds. The rule goes with the `nft` process this keeps: when this ends in any way,
    even by SIGKILL, the pipe to nft closes and the kernel drops the table."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    lease = _Lease(float(args["lease_s"]))
    try:
        held = fence.Fence(args["table"], args["ports"], args["peers"])
    except (fence.FenceError, ValueError, OSError) as e:
        print(MARKER + json.dumps({"error": str(e)}), flush=True)
        return 1
    print(MARKER + json.dumps({"table": held.table}), flush=True)
    lease.listen(lambda word: None)
    while lease.check() is None and held.alive:
        time.sleep(_POLL_S)
    held.close()
    return 0


# --- probes ----------------------------------------------------------------------------------


def sweep(args: dict) -> dict:
    """SIGKILL the job's leftovers and wait (bounded) until they are gone."""
    pids = node_tools.job_pids(args["job_id"])
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 2.0
    while node_tools.job_pids(args["job_id"]) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    return {"killed": pids, "left": node_tools.job_pids(args["job_id"])}


def netio(args: dict) -> dict:
    """Bytes sent and received over every interface but loopback, from /proc/net/dev."""
    sent = recv = 0
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                continue
            fields = counters.split()
            recv += int(fields[0])
            sent += int(fields[8])
    return {"sent": sent, "recv": recv}


def _ports(base: int | None, count: int) -> dict:
    """`count` free ports (kernel-chosen, distinct), or which of base..base+count-1 are taken."""
    if base is None:
        return {"ports": node_tools.free_ports(count)}
    ports = list(range(base, base + count))
    return {"ports": ports, "taken": node_tools.taken_ports(ports)}


def prepare(args: dict) -> dict:
    ports = args["ports"]
    private = args.get("private_dir")
    return {**_ports(ports["base"], ports["count"]), "hashes": {p: node_tools.file_sha256(p) for p in args["files"]},
            "net": netio({}), "private_dir": node_tools.private_dir(private) if private else None}


def _say(marker: str, payload: dict) -> None:
    try:
        sys.stderr.write(marker + json.dumps(payload) + "\n")
        sys.stderr.flush()
    except OSError:  # the channel is gone; the keeper still has a group to stop
        pass


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "run":
        sys.exit(run())
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    if mode == "fence":
        sys.exit(hold_fence(args))
    try:
        result = {"prepare": prepare, "netio": netio, "sweep": sweep}[mode](args)
    except Exception as e:
        result = {"error": f"{type(e).__name__}: {e}"}
    print(MARKER + json.dumps(result), flush=True)
    sys.exit(1 if "error" in result else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
