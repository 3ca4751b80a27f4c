"""The program `cluster check` and the network facts run on every node with the node's own Python.

Why a separate file with only the standard library: its source is sent over SSH and run as
`python -c SOURCE MODE ARGS_JSON` (`command.node_command`, with `node_tools.py` carried along),
so it must work before anything is known about the node's packages; running it with the
interpreter the tasks will use is itself the "python found" check.
It prints one line `@@ADRUN-PROBE {json}` (`serve`: one per answer; other output, e.g. from an
activate script, is ignored) and bounds every wait by itself, so it ends even if the SSH channel is gone.

Modes:
  facts  {"workdir", "script", "ports"}    versions, CPUs, memory, GPUs, disk, script, ports,
                                           whether a job's packet-filter rule can be installed
  recv   {"port", "timeout", "pings"?, "shape"?}
                                           accept one TCP stream, answer `pings` one-byte round
                                           trips, count the rest of its bytes, acknowledge, and
                                           answer at once in one JSON line the stream's arrivals
                                           as the kernel timed them (`_stream`: the rate is taken
                                           from them, so that neither process's scheduling
                                           counts); with `shape`, then time a UDP blast (below)
  send   {"host", "port", "nbytes", "connect_timeout", "timeout", "pings"?, "max_s"?, "shape"?,
          "sndbuf"?}                       time `pings` one-byte round trips with a `recv`, then
                                           stream nbytes to it (stopping after max_s seconds, if
                                           given), time until its ack and read the receiver's
                                           line (its `arrivals`, under "receiver"); with `shape`, then blast
                                           (each socket asking for `sndbuf` bytes of send buffer,
                                           if given: a test's stand-in for a host's wmem_max)
  serve  {"timeout", "idle_s"}            a node's probe for a whole measurement (the network
                                           facts' rounds: launch/nodes/standing_probes.py): listens
                                           on a port the kernel chooses (TCP, and UDP for `shape`)
                                           and answers first {"port", "boot_id", "cpus"}; then
                                           receives, as `recv`, every transfer sent to that port,
                                           each announced by its sender in a JSON line (`pings`,
                                           `shape`; any other, or none within ANNOUNCE_S: the
                                           connection is dropped), and for each JSON line
                                           {"send": ARGS} on its input sends one, as `send`
                                           (announced), answering its result; ends when its
                                           input ends (the launcher is done or gone) or after
                                           `idle_s` with neither, a transfer bounded by `timeout`. Starting a Python over SSH took
                                           about 0.6 s of a round of 2 transfers on namespace hosts
                                           and 1.1 s of a round of 4, its transfer 0.9 s: started
                                           once, not twice a transfer.

`shape` (Linux only; elsewhere nothing is collected) measures what a token bucket shaper on the path
does, for launch/nodes/link_shape.py to read: the receiver keeps the kernel's arrival time of the
stream's first TRACE_S seconds (its burst: what passes faster than the rate after an idle moment),
answered in the line after the ack with the arrivals. After that line the sender sends a UDP hello, which the receiver acknowledges over the TCP
connection; unheard within HELLO_WAIT_S plus two of the connection's round trips (`_late_s`: what
the sender sends in answer to the receiver comes a round trip after it; UDP filtered), no blast
follows. Heard, the sender blasts BLAST_S seconds of the stream's rate in UDP datagrams, as fast as
it can (UDP GSO; peaks of about 16 Gbit/s measured on the dev host), which fill the path's queue
until it drops; the receiver keeps the arrival times of the first and last datagram from the
sender's host (the queue's size: how long it keeps delivering after the sender stopped) and answers
both over the TCP connection, in JSON to the connection's end.
A link faster than the blast, a queue longer than the blast (BLAST_S of the rate; the receiver stops
BLAST_DRAIN_S after it), or a queue bigger than the blast sockets' send buffers (net.core.wmem_max
without CAP_NET_ADMIN), shows no full queue: link_shape.py reads 0 (unknown).
Any failure of this stage leaves the stream's figures and the receiver's line standing (the line
comes before the stage), with `shape_error` saying why. The sender reads what the receiver answers
bounded (ACCOUNT_MAX bytes, by the transfer's deadline) and checked (`_account`), under the one key
"receiver": a receiver that is not ours can neither overwrite the sender's figures nor make it fail
later.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import platform
import select
import shutil
import socket
import struct
import subprocess
import sys
import time

from . import fence, node_tools

MARKER = "@@ADRUN-PROBE "
BIND_FAILED = 3  # exit code of `recv` when its port is taken, so the caller retries another
BIND_ATTEMPTS = 3  # ports `serve` tries for a TCP port whose number is free for UDP too
ANNOUNCE_MAX = 1024  # bytes of a transfer's announcement to a `serve` probe
# its sender announces as it connects: a connection silent longer (not a sender) is dropped, so that
# it holds the probe, which serves one connection at a time, no longer than this
ANNOUNCE_S = 5.0
# Linux socket options the standard library does not name
SO_TIMESTAMPNS = 35  # each read's kernel arrival time (of its last packet), as SCM_TIMESTAMPNS
UDP_SEGMENT = 103  # one send of many datagrams, cut by the kernel (UDP GSO): a blast outruns any link
TRACE_S = 0.2  # the start of a `shape` stream whose arrivals are kept...
TRACE_MAX = 4096  # ...at most this many (a 100 Mbit/s link's 0.2 s is about 1,700 packets)
ACCOUNT_MAX = 1 << 19  # bytes of a receiver's answer the sender reads: TRACE_MAX points fit with room
ARRIVAL_WINDOWS = 64  # the stream's arrivals are kept at each this-many-th of its bytes (transfer.py `steady_rate`)
DATAGRAM = 1200  # fits any path's MTU
# datagrams per send with UDP_SEGMENT: a shaper whose bucket holds a send queues and passes it whole,
# so the queue is measured one send short: 12,000 bytes, 2 % of a 100 Mbit/s link's 50 ms
GSO_DATAGRAMS = 10
BLAST_S = 0.5  # a blast sends this long of the stream's rate...
BLAST_MAX_BYTES = 64 << 20  # ...at most this much...
BLAST_SNDBUF = 1 << 26  # ...through sockets asking for send buffers this big (probe `_blast_sockets`)...
MAX_BLAST_SOCKETS = 64  # ...and at most this many of them
SO_SNDBUFFORCE = 32  # SO_SNDBUF past net.core.wmem_max, with CAP_NET_ADMIN
GSO_REFUSED = (errno.EIO, errno.EINVAL, errno.EMSGSIZE)  # a GSO send the device cannot do: send single datagrams
HELLO = b"hello"  # the UDP hello before a blast: does UDP reach the receiver at all?
HELLO_EVERY_S = 0.02  # the sender repeats it this often...
HELLO_WAIT_S = 0.3  # ...until the receiver answers; the receiver waits this long for one (none: UDP is filtered)
BLAST_WAIT_S = 0.5  # after the hello, the receiver waits this long for the blast's first datagram
QUIET_S = 0.2  # and ends the blast when none came for this long,
BLAST_DRAIN_S = 1.0  # or this long after the sender's BLAST_S, whichever is first
# (each receiver wait above grows by `_late_s`)
TCPI_RTT_OFFSET = 68  # struct tcp_info's tcpi_rtt (microseconds, smoothed): after 8 bytes and 15 u32 fields


def facts(args: dict) -> dict:
    """What the node has; TensorFlow is imported last because it takes seconds."""
    workdir = args["workdir"]
    out: dict = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "cpus": _cpus(),
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
    shape = bool(args.get("shape")) and sys.platform.startswith("linux")
    blast = None
    if shape:
        try:
            blast = blast_receiver("", args["port"])  # as bind_as_grpc's
        except OSError as e:
            _emit({"error": f"bind UDP {args['port']}: {e.strerror}"})
            sys.exit(BIND_FAILED)
    _timestamped(server)
    server.settimeout(args["timeout"])
    with server, contextlib.closing(blast) if blast is not None else contextlib.nullcontext():
        conn, _ = server.accept()
        with conn:
            total = _received(conn, blast, deadline, args.get("pings", 0))
    return {"bytes": total}


def _received(conn: socket.socket, blast: socket.socket | None, deadline: float, pings: int) -> int:
    """One transfer's receiving side on its accepted connection: answer `pings` round trips, count
    the stream's bytes, acknowledge, and send at once one line with the stream's arrivals
    (`_stream`), with `blast` (the `shape` stage) its first TRACE_S seconds' too; then, with
    `blast`, the blast timed after it. The stream's bytes."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.settimeout(max(0.1, deadline - time.monotonic()))
    for _ in range(pings):
        if not conn.recv(1):
            raise ConnectionError("sender closed during the round trips")
        conn.sendall(b"p")
    trace: list = []
    total, arrivals = _stream(conn, deadline, trace)
    line: dict = {"arrivals": arrivals} if blast is None else {"arrivals": arrivals, "trace": trace}
    conn.sendall(b"k" + json.dumps(line).encode() + b"\n")  # before the `shape` stage, whatever it does
    if blast is not None:
        conn.sendall(json.dumps(_timed_blast(blast, conn, deadline)).encode())
    return total


def _stream(conn: socket.socket, deadline: float, trace: list) -> tuple[int, list]:
    """Read the stream to its end: its bytes, and its arrivals [seconds since its first packet
    arrived, bytes arrived by then] as the kernel timed them, at each ARRIVAL_WINDOWS-th of its
    bytes (none where the kernel does not time them); every arrival of its first TRACE_S seconds
    into `trace` (at most TRACE_MAX). Kernel times, because this process may read late: a read after a pause returns
    what arrived meanwhile, timed as it arrived (the rate from them: transfer.py `steady_rate`).
    Reads of one time are one arrival, the last read's bytes: a busy machine's receive work, run
    late, times a clump of packets at once, which then take several reads (the trace's too: the
    burst, link_shape.py, reads the slopes between them)."""
    if not _timestamped(conn):
        total = 0
        while data := conn.recv(node_tools.CHUNK):
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            total += len(data)
        return total, []
    total, first, tracing = 0, None, True
    points: list = []
    size = 1  # the first read takes one byte: its time is the first packet's
    while True:
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        data, ancillary, _, _ = conn.recvmsg(size, 64)
        if not data:
            return total, _thinned(points, total)
        total += len(data)
        size = node_tools.CHUNK
        arrived = _arrival(ancillary)
        if arrived is None:  # no kernel time (bytes that came before the socket asked for them): no point
            continue
        first = arrived if first is None else first
        point = [arrived - first, total]
        if points and points[-1][0] == point[0]:  # one clump's bytes (below): its last read stands for it
            points[-1] = point
            if trace and trace[-1][0] == point[0]:
                trace[-1] = point
        else:
            points.append(point)
            if tracing:
                trace.append(point)
        tracing = tracing and arrived - first <= TRACE_S and len(trace) < TRACE_MAX


def _timestamped(sock: socket.socket) -> bool:
    """Ask the kernel to time each read's arrival (SO_TIMESTAMPNS; Linux only): on a listening
    socket, so that its connections' first bytes, which may come before they are accepted, are
    timed too (an accepted socket inherits it). Whether it will: not where the kernel refuses
    the option (then the rate is the sender's time's)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _thinned(points: list, total: int) -> list:
    """Of `points` ([seconds, bytes by then], in order), the first to reach each ARRIVAL_WINDOWS-th
    of `total` bytes, the first point included: a few dozen numbers however many reads there were."""
    kept: list = []
    share = 0
    for point in points:
        if point[1] * ARRIVAL_WINDOWS >= total * share:
            kept.append(point)
            while point[1] * ARRIVAL_WINDOWS >= total * share:
                share += 1
    return kept


def serve(args: dict) -> None:
    """A node's probe for a whole measurement (`serve` above): receive every transfer sent to its
    port, send one for each command, until its input ends or nothing happened for `idle_s`."""
    server, blast = _listeners()
    _emit({"port": server.getsockname()[1], "boot_id": _boot_id(), "cpus": _cpus()})
    commands = _Commands(sys.stdin.fileno())
    with server, contextlib.closing(blast) if blast is not None else contextlib.nullcontext():
        while True:
            ready = select.select([commands.fd, server.fileno()], [], [], args["idle_s"])[0]
            if not ready:
                return  # nothing for idle_s: the launcher is gone without closing this input
            if server.fileno() in ready:
                conn, peer = server.accept()
                with conn:
                    try:
                        _serve_transfer(conn, blast, args["timeout"])
                    except (OSError, ValueError) as e:  # the sender reports its side; keep serving
                        sys.stderr.write(f"receiving from {_host(peer)}: {type(e).__name__}: {e}\n")
            if commands.fd in ready:
                lines = commands.read()
                if lines is None:
                    return  # input ended: the launcher is done
                for line in lines:
                    _emit(_command(json.loads(line)))


def _listeners() -> tuple[socket.socket, socket.socket | None]:
    """A listening TCP socket on a port the kernel chose, and (Linux: the `shape` stage) a blast
    receiver on the same port number; another port when that one is taken for UDP."""
    for _ in range(BIND_ATTEMPTS):
        server = node_tools.bind_as_grpc(0)
        _timestamped(server)
        if not sys.platform.startswith("linux"):
            return server, None
        try:
            return server, blast_receiver("", server.getsockname()[1])
        except OSError:
            server.close()
    raise OSError(f"no port free for both TCP and UDP in {BIND_ATTEMPTS} attempts")


def _serve_transfer(conn: socket.socket, blast: socket.socket | None, timeout: float) -> None:
    """A transfer sent to a `serve` probe: its announcement (round trips, `shape`), then as `recv`.
    Datagrams left from an earlier blast are dropped first, so that none is counted in this one."""
    deadline = time.monotonic() + timeout
    conn.settimeout(min(timeout, ANNOUNCE_S))
    pings, shape = _announcement(_line(conn))
    conn.settimeout(timeout)
    shaped = blast if shape else None
    if shaped is not None:
        _drain(shaped)
    _received(conn, shaped, deadline, pings)


def _announcement(line: bytes) -> tuple[int, bool]:
    """A transfer's announcement: its round trips and whether it has the `shape` stage; raises
    ValueError for anything else (not a sender of ours), which the probe reports and serves on."""
    announced = _json(line)
    if not isinstance(announced, dict):
        raise ValueError(f"an announcement that is not an object: {line[:80]!r}")
    pings, shape = announced.get("pings", 0), announced.get("shape", False)
    if type(pings) is not int or pings < 0 or type(shape) is not bool:
        raise ValueError(f"an announcement without its round trips and stage: {line[:80]!r}")
    return pings, shape


def _json(data: bytes) -> object:
    """`data` as JSON; ValueError for anything else, a nesting too deep to parse included (which
    raises RecursionError: from a stranger's connection it must not end the probe)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested too deep: {data[:80]!r}") from None


def _line(conn: socket.socket) -> bytes:
    """A line read from `conn` byte by byte (what follows it is the transfer's), at most ANNOUNCE_MAX bytes."""
    line = b""
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte or len(line) >= ANNOUNCE_MAX:
            raise ValueError(f"no announcement from the sender: {line[:80]!r}")
        line += byte
    return line


def _drain(blast: socket.socket) -> None:
    blast.setblocking(False)
    try:
        while True:
            blast.recv(DATAGRAM)
    except BlockingIOError:
        pass


def _command(command: dict) -> dict:
    """A launcher's command to a `serve` probe: {"send": ARGS}, as `send` with its announcement."""
    try:
        return send({**command["send"], "announce": True})
    except Exception as e:  # the transfer failed: its error is the answer, and the probe serves on
        return {"error": f"{type(e).__name__}: {e}"}


class _Commands:
    """The launcher's commands, one JSON line each, on a file descriptor read when select says so."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def read(self) -> list[bytes] | None:
        """The lines completed by what can be read now; None at the end of the input."""
        data = os.read(self.fd, node_tools.CHUNK)
        if not data:
            return None
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        return [line for line in lines if line.strip()]


def _boot_id() -> str | None:
    """The running kernel's boot id: one per machine, shared by its namespaces and containers."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _cpus() -> int | None:
    """The CPUs a process started here may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def blast_receiver(host: str, port: int) -> socket.socket:
    """The UDP socket a blast is received on: bound to `port`, each datagram's kernel arrival time
    kept, a receive buffer as large as the kernel allows (rmem_max caps it)."""
    blast = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        blast.bind((host, port))
        blast.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        blast.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    except OSError:
        blast.close()
        raise
    return blast


def _timed_blast(blast: socket.socket, conn: socket.socket, deadline: float) -> dict:
    """Answer the sender's UDP hello over `conn` ("h"; "n" when none came within HELLO_WAIT_S:
    UDP is filtered, no blast follows), then the blast's datagrams received from the TCP peer
    and the kernel arrival times of the first and last apart (None: none came)."""
    peer = _host(conn.getpeername())
    late = _late_s(conn)
    hello_wait = HELLO_WAIT_S + late
    heard = _receive(blast, peer, min(deadline, time.monotonic() + hello_wait), hello_wait, HELLO)
    conn.sendall(b"h" if heard else b"n")
    if not heard:
        return {"received": 0, "arrival_s": None}
    count, last = 0, 0.0
    first_arrival: float | None = None
    end = min(deadline, time.monotonic() + late + BLAST_S + BLAST_DRAIN_S)
    wait = BLAST_WAIT_S + late
    while (arrived := _receive(blast, peer, end, wait, DATAGRAM)) is not None:
        count += 1
        first_arrival = arrived if first_arrival is None else first_arrival
        last, wait = arrived, QUIET_S
    return {"received": count, "arrival_s": None if first_arrival is None else last - first_arrival}


def _late_s(conn: socket.socket) -> float:
    """How much later than on a near path an answer to what this end sends over `conn` may come:
    two of its round trips (the kernel's smoothed estimate, TCP_INFO; 0 where there is none). One
    is what the answer takes at least (the request's way there, the answer's way back); the other
    covers an estimate short of a round trip that has grown since."""
    try:
        info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except (AttributeError, OSError):  # not Linux: no TCP_INFO
        return 0.0
    if len(info) < TCPI_RTT_OFFSET + 4:
        return 0.0
    return 2 * struct.unpack_from("I", info, TCPI_RTT_OFFSET)[0] * 1e-6


def _receive(blast: socket.socket, peer: str, end: float, wait: float, expect: int | bytes) -> float | None:
    """The kernel arrival time of the next datagram from `peer` that is `expect` (its size, or its
    bytes), waiting at most `wait` seconds for each and never past `end`; None when none came (or
    no kernel time). Others (a stray sender, a repeated hello) are skipped."""
    while (left := end - time.monotonic()) > 0:
        blast.settimeout(min(wait, left))
        try:
            data, ancillary, _, address = blast.recvmsg(DATAGRAM, 64)
        except TimeoutError:  # socket.timeout
            return None
        if _host(address) == peer and (data == expect if isinstance(expect, bytes) else len(data) == expect):
            return _arrival(ancillary)
    return None


def _host(address: tuple) -> str:
    """An address's host, an IPv4 address mapped into IPv6 as itself."""
    host = address[0]
    return host.removeprefix("::ffff:") if isinstance(host, str) else host


def _arrival(ancillary: list) -> float | None:
    """A read's kernel arrival time from its ancillary data: a struct timespec, two 64-bit fields,
    or two 32-bit ones on a 32-bit kernel."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 8:
            seconds, nanoseconds = struct.unpack("qq", data[:16]) if len(data) >= 16 else struct.unpack("ii", data[:8])
            return seconds + nanoseconds * 1e-9
    return None


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
        if args.get("announce"):  # to a `serve` probe, which learns each transfer's round trips and stage from it
            sock.sendall(json.dumps({"pings": args.get("pings", 0), "shape": bool(args.get("shape"))}).encode() + b"\n")
        rtt_s: list[float] = []
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
        seconds = time.monotonic() - start
        if ack != b"k":
            raise ConnectionError("receiver closed without acknowledging")
        result: dict = {"bytes": args["nbytes"] - left, "seconds": seconds, "rtt_s": rtt_s}
        try:
            result["receiver"] = _account(sock, deadline, line=True)
        except (OSError, ValueError) as e:  # no arrivals: the rate is this side's seconds'; no stage either
            result["receiver_error"] = f"{type(e).__name__}: {e}"
            return result
        if args.get("shape") and sys.platform.startswith("linux"):
            try:
                result.update(_shape(sock, result["bytes"] / seconds, deadline, args.get("sndbuf"), result["receiver"]))
            except (OSError, ValueError) as e:  # the optional stage failed: the stream's figures stand
                result["shape_error"] = f"{type(e).__name__}: {e}"
    return result


def _shape(sock: socket.socket, rate: float, deadline: float, sndbuf: int | None, receiver: dict) -> dict:
    """The sender's side of `shape` after the receiver's line: a UDP hello, the blast when it was
    heard (its figures, returned), and the receiver's side of the blast (into `receiver`)."""
    sent = _blast(sock, min(rate * BLAST_S, BLAST_MAX_BYTES), deadline, sndbuf) if _hello(sock, deadline) else {}
    receiver.update(_account(sock, deadline, line=False))
    return sent


def _hello(sock: socket.socket, deadline: float) -> bool:
    """Whether UDP reaches the receiver: a small datagram sent each HELLO_EVERY_S until the receiver
    says over the TCP connection that one came ("h") or that none did within its wait ("n": the
    receiver's wait opened as it acknowledged the stream, and is HELLO_WAIT_S plus `_late_s`)."""
    answer_by = min(deadline, time.monotonic() + 2 * (HELLO_WAIT_S + _late_s(sock)))
    with socket.socket(sock.family, socket.SOCK_DGRAM) as hello:
        hello.connect(sock.getpeername())
        while time.monotonic() < answer_by:
            try:
                hello.send(HELLO)
            except OSError:  # refused (an ICMP answer to an earlier one): the receiver will say "n"
                pass
            if select.select([sock], [], [], HELLO_EVERY_S)[0]:
                return sock.recv(1) == b"h"
    raise TimeoutError("no answer to the UDP hello")


def _blast_sockets(stack: contextlib.ExitStack, sock: socket.socket, nbytes: float,
                   sndbuf: int | None) -> list[socket.socket]:
    """UDP sockets connected to the TCP connection's peer whose send buffers together hold `nbytes`
    (at most MAX_BLAST_SOCKETS), each closed with `stack` (also when a later one fails): a UDP send
    blocks once its socket's datagrams in the path's queue fill its buffer, so buffers smaller than
    the queue never fill it. Each asks for BLAST_SNDBUF (forced where permitted, else capped by
    net.core.wmem_max), or `sndbuf` when given (to stand for a host with that wmem_max); the kernel
    reports twice what it grants, and a datagram costs about twice its bytes there, so a socket
    holds about half the reported size."""
    sockets: list[socket.socket] = []
    count = 1
    while len(sockets) < count:
        out = stack.enter_context(socket.socket(sock.family, socket.SOCK_DGRAM))
        sockets.append(out)
        if sndbuf is not None:
            out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        else:
            try:
                out.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, BLAST_SNDBUF)
            except OSError:  # not permitted (no CAP_NET_ADMIN): as much as wmem_max allows
                out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BLAST_SNDBUF)
        holds = out.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2
        count = min(MAX_BLAST_SOCKETS, max(1, math.ceil(nbytes / holds)))
        out.connect(sock.getpeername())
    return sockets


def _blast(sock: socket.socket, nbytes: float, deadline: float, sndbuf: int | None) -> dict:
    """Send about `nbytes` of UDP datagrams to the TCP connection's peer as fast as this machine
    can: the datagrams sent and the seconds from the first send to the last one's return."""
    with contextlib.ExitStack() as stack:
        sockets = _blast_sockets(stack, sock, nbytes, sndbuf)
        group = GSO_DATAGRAMS
        for out in sockets:
            try:
                out.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, DATAGRAM)
            except OSError:
                group = 1  # no UDP GSO: one datagram per send
        block = b"\0" * (DATAGRAM * GSO_DATAGRAMS)
        datagrams, sends = 0, 0
        start = time.monotonic()
        stop_by = min(deadline, start + BLAST_S)  # a machine slower than its link fills no queue anyway
        try:
            while datagrams * DATAGRAM < nbytes and time.monotonic() < stop_by:
                out = sockets[sends % len(sockets)]
                out.settimeout(max(1e-3, stop_by - time.monotonic()))  # a send blocked on full buffers ends with the blast
                try:
                    out.send(block[: DATAGRAM * group])
                except OSError as e:
                    if group == 1 or e.errno not in GSO_REFUSED:
                        raise
                    group = 1  # the path's device cannot segment: one datagram per send from here
                    continue
                sends += 1
                datagrams += group
        except OSError:  # the path refuses (an ICMP answer), or the buffers stayed full: what was sent stands
            pass
        send_s = time.monotonic() - start
    return {"sent": datagrams, "send_s": send_s}


def _account(sock: socket.socket, deadline: float, *, line: bool) -> dict:
    """The receiver's answer, checked: with `line`, the line after its acknowledgement (the
    stream's `arrivals`, and `trace` for `shape`), read up to its newline and no further (the hello's
    answer may follow); else its side of the blast (`received`, `arrival_s`), read to the
    connection's end. At most ACCOUNT_MAX bytes, by `deadline`; ValueError for anything else."""
    chunks: list[bytes] = []
    size = 0
    while True:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        data = sock.recv(node_tools.CHUNK, socket.MSG_PEEK) if line else sock.recv(node_tools.CHUNK)
        if line and data:
            end = data.find(b"\n")
            data = sock.recv(len(data) if end < 0 else end + 1)  # no further than the newline
        size += len(data)
        if size > ACCOUNT_MAX:
            raise ValueError(f"the receiver's answer is longer than {ACCOUNT_MAX} bytes")
        chunks.append(data)
        if not data or (line and data.endswith(b"\n")):
            break
    if line and not data:
        raise ValueError("the receiver's line ended early")
    answer = _json(b"".join(chunks) or b"{}")
    if not isinstance(answer, dict):
        raise ValueError(f"the receiver's answer is not an object: {answer!r:.80}")
    if line:
        points = {"arrivals": _points(answer.get("arrivals", []), "arrivals")}
        if "trace" in answer:
            points["trace"] = _points(answer["trace"], "trace")
        return points
    received, arrival_s = answer.get("received", 0), answer.get("arrival_s")
    if type(received) is not int or received < 0 or not (arrival_s is None or _number(arrival_s)):
        raise ValueError(f"the receiver's blast is not a count and a time: {answer!r:.80}")
    return {"received": received, "arrival_s": arrival_s}


def _points(points: object, key: str) -> list:
    """The receiver's `points` ([seconds, bytes] pairs of numbers), or ValueError."""
    if not isinstance(points, list) or not all(
            isinstance(point, list) and len(point) == 2 and all(map(_number, point)) for point in points):
        raise ValueError(f"the receiver's {key} are not [seconds, bytes] pairs: {points!r:.80}")
    return points


def _number(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def _emit(result: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    mode, args = argv[0], json.loads(argv[1])
    try:
        result = {"facts": facts, "recv": recv, "send": send, "serve": serve}[mode](args)
        if result is not None:  # `serve` answered as it went
            _emit(result)
    except Exception as e:
        _emit({"error": f"{type(e).__name__}: {e}"})
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
