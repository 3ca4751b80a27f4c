"""The program `cluster check` runs on every node with the node's own Python.

Why a separate file with only the standard library: its source is sent over SSH and run as
`python -c SOURCE MODE ARGS_JSON` (`command.node_command`, with `node_tools.py` carried along),
so it must work before anything is known about the node's packages; running it with the
interpreter the tasks will use is itself the "python found" check.
It prints one line `@@ADRUN-PROBE {json}` (other output, e.g. from an activate script, is
ignored) and bounds every wait by itself, so it ends even if the SSH channel is gone.

Modes:
  facts  {"workdir", "script", "ports"}    versions, CPUs, memory, GPUs, disk, script, ports,
                                           whether a job's packet-filter rule can be installed
  recv   {"port", "timeout", "pings"?}     accept one TCP stream, answer `pings` one-byte round
                                           trips, count the rest of its bytes, acknowledge
  send   {"host", "port", "nbytes", "connect_timeout", "timeout", "pings"?, "max_s"?}
                                           time `pings` one-byte round trips with a `recv`, then
                                           stream nbytes to it (stopping after max_s seconds, if
                                           given) and time until its ack
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time

from . import fence, node_tools

MARKER = "@@ADRUN-PROBE "
BIND_FAILED = 3  # exit code of `recv` when its port is taken, so the caller retries another


def facts(args: dict) -> dict:
    """What the node has; TensorFlow is imported last because it takes seconds."""
    workdir = args["workdir"]
    out: dict = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        **_memory(),
        "gpus": _gpus(),
        "workdir_exists": os.path.isdir(workdir),
        "disk_free": shutil.disk_usage(workdir).free if os.path.isdir(workdir) else None,
        "script": _script(workdir, args.get("script")),
        "ports_taken": node_tools.taken_ports(args.get("ports", [])),
        "fence_problem": fence.fence_problem(),  # None: a job's ports can be closed to other hosts here
    }
    out.update(_module_version("adrun", "adrun"))
    out["keras"] = _distribution_version("keras")  # TF2 mode patches it: the same release everywhere
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    out.update(_module_version("tensorflow", "tensorflow"))
    return out


def _memory() -> dict:
    fields = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                fields[key] = int(rest.split()[0]) * 1024
    except OSError:
        return {"mem_total": None, "mem_available": None}
    return {"mem_total": fields.get("MemTotal"), "mem_available": fields.get("MemAvailable")}


def _gpus() -> list | None:
    """GPU names from nvidia-smi; None when nvidia-smi is absent (no NVIDIA driver)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else []


def _script(workdir: str, script: str | None) -> dict | None:
    if script is None:
        return None
    path = os.path.join(workdir, script)
    return {"path": path, "sha256": node_tools.file_sha256(path)}


def _module_version(key: str, module: str) -> dict:
    try:
        mod = __import__(module)
        return {key: str(getattr(mod, "__version__", "unknown")), f"{key}_error": None}
    except Exception as e:  # any import failure is a finding, not a crash
        return {key: None, f"{key}_error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}


def _distribution_version(name: str) -> str | None:
    """An installed distribution's version from its metadata (importing Keras would take seconds)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def recv(args: dict) -> dict:
    deadline = time.monotonic() + args["timeout"]
    try:
        server = node_tools.bind_as_grpc(args["port"])
    except OSError as e:
        _emit({"error": f"bind {args['port']}: {e.strerror}"})
        sys.exit(BIND_FAILED)
    server.settimeout(args["timeout"])
    conn, _ = server.accept()
    total = 0
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        for _ in range(args.get("pings", 0)):
            if not conn.recv(1):
                raise ConnectionError("sender closed during the round trips")
            conn.sendall(b"p")
        while True:
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            data = conn.recv(node_tools.CHUNK)
            if not data:
                break
            total += len(data)
        conn.sendall(b"k")
    server.close()
    return {"bytes": total}


def send(args: dict) -> dict:
    connect_by = time.monotonic() + args["connect_timeout"]
    sock = None
    while sock is None:  # the receiver may still be starting: retry refusals for a while
        try:
            sock = socket.create_connection((args["host"], args["port"]), timeout=args["connect_timeout"])
        except ConnectionRefusedError:
            if time.monotonic() > connect_by:
                raise
            time.sleep(0.05)
    deadline = time.monotonic() + args["timeout"]
    block = b"\0" * node_tools.CHUNK
    left = args["nbytes"]
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        rtt_s = []
        for _ in range(args.get("pings", 0)):
            before = time.perf_counter()
            sock.sendall(b"p")
            if not sock.recv(1):
                raise ConnectionError("receiver closed during the round trips")
            rtt_s.append(time.perf_counter() - before)
        start = time.monotonic()
        stop_by = start + args["max_s"] if args.get("max_s") else deadline
        while left > 0 and time.monotonic() < stop_by:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            left -= sock.send(block[: min(left, node_tools.CHUNK)])
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        ack = sock.recv(1)
    if ack != b"k":
        raise ConnectionError("receiver closed without acknowledging")
    return {"bytes": args["nbytes"] - left, "seconds": time.monotonic() - start, "rtt_s": rtt_s}


def _emit(result: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    mode, args = argv[0], json.loads(argv[1])
    try:
        _emit({"facts": facts, "recv": recv, "send": send}[mode](args))
    except Exception as e:
        _emit({"error": f"{type(e).__name__}: {e}"})
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
