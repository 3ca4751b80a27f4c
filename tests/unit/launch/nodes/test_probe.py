"""The probe's `shape` stage on loopback (launch/nodes/probe.py): a UDP hello before the blast, a
receiver that counts only its sender's datagrams and ends by itself, a blast that falls back to
single datagrams, and a failing stage that leaves the stream's figures standing."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from adrun.launch.nodes import probe
from tests.support.ports import free_ports
from tests.support.timed_connection import TimedConnection

NBYTES = 1 << 20


@pytest.fixture
def receiver():
    """A `recv` probe with `shape` in its own process; yields its port, then its result line."""
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "adrun.launch.nodes.probe", "recv",
                             json.dumps({"port": port, "timeout": 20, "pings": 2, "shape": True})],
                            stdout=subprocess.PIPE, text=True)
    try:
        yield port
    finally:
        proc.communicate(timeout=30)


def send(port: int) -> dict:
    return probe.send({"host": "127.0.0.1", "port": port, "nbytes": NBYTES, "connect_timeout": 10,
                       "timeout": 20, "pings": 2, "shape": True})


def test_a_heard_hello_is_followed_by_a_blast_and_the_receivers_account(receiver):
    result = send(receiver)
    assert result["bytes"] == NBYTES and len(result["rtt_s"]) == 2
    account = result["receiver"]
    assert result["sent"] > 0 and 0 < account["received"] <= result["sent"] and "shape_error" not in result
    assert account["trace"][-1][1] <= NBYTES and account["arrivals"][-1][1] == NBYTES


def test_an_unheard_hello_skips_the_blast_and_keeps_the_stream(receiver, monkeypatch):
    """UDP filtered (here: a hello the receiver does not take for one): no blast, no error."""
    monkeypatch.setattr(probe, "HELLO", b"not a hello")
    result = send(receiver)
    assert result["bytes"] == NBYTES and result["receiver"]["received"] == 0 and result["receiver"]["arrival_s"] is None
    assert "sent" not in result and "shape_error" not in result


@pytest.mark.parametrize(("stage", "failure"), [("_hello", TimeoutError("no answer to the UDP hello")),
                                               ("_blast", OSError("refused"))])
def test_a_failing_shape_stage_leaves_the_streams_figures_and_arrivals(receiver, monkeypatch, stage, failure):
    """The sender's side of the stage fails (its hello unanswered, its blast refused): the stream's
    figures stand, and so do the receiver's arrivals and trace, which came before the stage."""
    def fail(*args):
        raise failure

    monkeypatch.setattr(probe, stage, fail)
    result = send(receiver)
    assert result["bytes"] == NBYTES and len(result["rtt_s"]) == 2
    assert result["shape_error"] == f"{type(failure).__name__}: {failure}" and "sent" not in result
    assert result["receiver"]["arrivals"][-1][1] == NBYTES and result["receiver"]["trace"]


def hand_receiver(answer: bytes) -> tuple[int, threading.Thread]:
    """A receiver of one stream that is not a probe: it acknowledges the stream, answers `answer`
    and closes; its port, and its thread."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server, server.accept()[0] as conn:
            while conn.recv(1 << 16):
                pass
            with contextlib.suppress(OSError):  # the sender stops reading an answer too long
                conn.sendall(b"k" + answer)

    thread = threading.Thread(target=serve)
    thread.start()
    return server.getsockname()[1], thread


@pytest.mark.parametrize(("answer", "error"), [
    (b'{"arrivals": [[0, 1], [0.1, 2]], "bytes": 1, "seconds": -1, "rtt_s": null}\n', None),
    (b'{"arrivals": [[0, 1], [0.1, "x"]]}\n', "ValueError: the receiver's arrivals are not"),
    (b'{"arrivals": [[0, 1], [Infinity, 2]]}\n', "ValueError: the receiver's arrivals are not"),
    (b'{"arrivals": {}}\n', "ValueError: the receiver's arrivals are not"),
    (b"[]\n", "ValueError: the receiver's answer is not an object"),
    (b"[" * 5000 + b"\n", "ValueError: JSON nested too deep"),
    (b" " * (probe.ACCOUNT_MAX + 1), "ValueError: the receiver's answer is longer than"),
    (b'{"arrivals": []', "ValueError: the receiver's line ended early"),
], ids=["extra-keys", "a-string", "infinite", "not-a-list", "not-an-object", "nested", "too-long", "no-newline"])
def test_the_receivers_answer_is_checked_and_kept_under_its_own_key(answer, error):
    """What the receiver answers cannot overwrite the sender's figures, and an answer that is not
    a probe's (malformed, endless, nested past the parser) leaves the stream's figures and no arrivals."""
    port, thread = hand_receiver(answer)
    result = probe.send({"host": "127.0.0.1", "port": port, "nbytes": NBYTES, "connect_timeout": 10, "timeout": 20})
    thread.join(30)
    assert result["bytes"] == NBYTES and result["seconds"] > 0 and result["rtt_s"] == []
    if error is None:
        assert result["receiver"] == {"arrivals": [[0, 1], [0.1, 2]]} and "receiver_error" not in result
    else:
        assert result["receiver_error"].startswith(error) and "receiver" not in result


@pytest.fixture
def tcp_pair():
    """A connected TCP pair on 127.0.0.1 (the receiver's end, the sender's end) and the port of it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        sender = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
    with conn, sender:
        yield conn, sender, port


def udp_from(host: str) -> socket.socket:
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.bind((host, 0))
    return out


def timed_beside(conn: socket.socket, port: int, send: Callable[[socket.socket], None],
                 stop: threading.Event | None = None) -> tuple[dict, bool]:
    """The receiver's `_timed_blast` on `port` while `send(peer socket)` runs in a thread, and
    whether that thread still ran when the receiver ended (`stop` is set after it)."""
    with probe.blast_receiver("127.0.0.1", port) as blast, udp_from("127.0.0.1") as peer:
        thread = threading.Thread(target=send, args=(peer,))
        thread.start()
        try:
            timed = probe._timed_blast(blast, conn, time.monotonic() + 60)
            still_sending = thread.is_alive()
        finally:
            if stop is not None:
                stop.set()
            thread.join()
    return timed, still_sending


def test_the_receiver_counts_only_its_senders_datagrams(tcp_pair):
    conn, sender, port = tcp_pair
    with probe.blast_receiver("127.0.0.1", port) as blast, udp_from("127.0.0.1") as peer, \
            udp_from("127.0.0.2") as stray:
        peer.sendto(probe.HELLO, ("127.0.0.1", port))
        for _ in range(5):  # another host's datagrams, some before the blast's
            stray.sendto(b"\0" * probe.DATAGRAM, ("127.0.0.1", port))
        for _ in range(3):
            peer.sendto(b"\0" * probe.DATAGRAM, ("127.0.0.1", port))
        timed = probe._timed_blast(blast, conn, time.monotonic() + 10)
    assert sender.recv(1) == b"h"
    assert timed["received"] == 3 and timed["arrival_s"] >= 0


def test_the_receiver_ends_past_its_end_while_datagrams_keep_coming(tcp_pair, monkeypatch):
    conn, sender, port = tcp_pair
    monkeypatch.setattr(probe, "BLAST_S", 0.1)
    monkeypatch.setattr(probe, "BLAST_DRAIN_S", 0.1)
    stop = threading.Event()

    def keep_sending(out: socket.socket) -> None:
        """For 30 s (unless stopped), never quiet long enough to end the blast."""
        out.sendto(probe.HELLO, ("127.0.0.1", port))
        until = time.monotonic() + 30
        while not stop.wait(probe.QUIET_S / 4) and time.monotonic() < until:
            out.sendto(b"\0" * probe.DATAGRAM, ("127.0.0.1", port))

    timed, still_sending = timed_beside(conn, port, keep_sending, stop)
    assert still_sending and timed["received"] > 0


def test_a_long_round_trips_late_hello_and_blast_are_still_heard(tcp_pair, monkeypatch):
    """A path of a 1 s round trip (simulated: the receiver's `_late_s`, and a sender that answers
    late): the hello comes past HELLO_WAIT_S and the blast past BLAST_WAIT_S, both still counted."""
    conn, sender, port = tcp_pair
    monkeypatch.setattr(probe, "_late_s", lambda conn: 2.0)
    answers = []

    def late_sender(out: socket.socket) -> None:
        time.sleep(2 * probe.HELLO_WAIT_S)  # a round trip after the receiver's wait opened
        out.sendto(probe.HELLO, ("127.0.0.1", port))
        answers.append(sender.recv(1))
        if answers == [b"h"]:
            time.sleep(2 * probe.BLAST_WAIT_S)  # the blast, a round trip after the "h"
            for _ in range(3):
                out.sendto(b"\0" * probe.DATAGRAM, ("127.0.0.1", port))

    timed, _ = timed_beside(conn, port, late_sender)
    assert answers == [b"h"] and timed["received"] == 3


def test_the_late_allowance_is_two_of_the_kernels_round_trips():
    class Connection:
        def getsockopt(self, level, option, size):
            assert (level, option) == (socket.IPPROTO_TCP, socket.TCP_INFO)
            return bytes(probe.TCPI_RTT_OFFSET) + (250_000).to_bytes(4, sys.byteorder) + bytes(size - 72)

    assert probe._late_s(Connection()) == pytest.approx(0.5)


def test_a_blast_the_device_cannot_segment_is_sent_as_single_datagrams(tcp_pair, monkeypatch):
    conn, sender, port = tcp_pair
    original = socket.socket

    class NoGSO(original):
        def send(self, data, *flags):
            if self.type == socket.SOCK_DGRAM and len(data) > probe.DATAGRAM:
                raise OSError(errno.EIO, "Input/output error")
            return super().send(data, *flags)

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as blast:
        blast.bind(("127.0.0.1", port))
        blast.settimeout(10)
        monkeypatch.setattr(socket, "socket", NoGSO)
        sent = probe._blast(sender, 100 * probe.DATAGRAM, time.monotonic() + 10, None)
        monkeypatch.setattr(socket, "socket", original)
        assert sent["sent"] == 100
        assert len(blast.recv(65536)) == probe.DATAGRAM


def test_a_blocked_blast_send_waits_no_longer_than_the_blast(tcp_pair, monkeypatch):
    """Send buffers that stay full (simulated: the sixth send blocks until its timeout): each send
    may wait only until the blast's end, not the whole transfer's deadline; what was sent stands."""
    conn, sender, port = tcp_pair
    original = socket.socket
    timeouts = []

    class Blocking(original):
        def send(self, data, *flags):
            if self.type != socket.SOCK_DGRAM:
                return super().send(data, *flags)
            timeouts.append(self.gettimeout())
            if len(timeouts) > 5:
                raise TimeoutError("timed out")  # what a send blocked for its whole timeout raises
            return len(data)

    monkeypatch.setattr(socket, "socket", Blocking)
    sent = probe._blast(sender, 1e9, time.monotonic() + 60, None)
    monkeypatch.setattr(socket, "socket", original)
    assert len(timeouts) == 6 and sent["sent"] == 5 * probe.GSO_DATAGRAMS
    assert all(0 < timeout <= probe.BLAST_S for timeout in timeouts)


@pytest.mark.parametrize("failing", ["setsockopt", "connect"])
def test_a_blast_socket_that_cannot_be_set_up_leaves_none_open(tcp_pair, monkeypatch, failing):
    """Small send buffers ask for several sockets; the third fails: the error stands, and every
    socket opened for the blast is closed."""
    conn, sender, port = tcp_pair
    original = socket.socket
    opened = []

    class ThirdFails(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            opened.append(self)

        def setsockopt(self, *args):
            if failing == "setsockopt" and len(opened) == 3:
                raise OSError(errno.ENOBUFS, "No buffer space available")
            return super().setsockopt(*args)

        def connect(self, address):
            if failing == "connect" and len(opened) == 3:
                raise OSError(errno.ENETUNREACH, "Network is unreachable")
            return super().connect(address)

    monkeypatch.setattr(socket, "socket", ThirdFails)
    with pytest.raises(OSError):
        probe._blast(sender, 1e9, time.monotonic() + 60, 4096)
    monkeypatch.setattr(socket, "socket", original)
    assert len(opened) == 3 and [out.fileno() for out in opened] == [-1, -1, -1]


# `serve`: a node's probe for a whole measurement

def test_a_hello_left_from_an_earlier_transfer_is_not_taken_for_this_ones(tcp_pair, monkeypatch):
    """A serving probe keeps its UDP socket across transfers: a hello of the same host's earlier
    transfer (one that came after the receiver had said "n") waits in it. A transfer whose hello
    does not come (UDP filtered now) still reads as unheard: no blast."""
    conn, sender, port = tcp_pair
    monkeypatch.setattr(probe, "HELLO_WAIT_S", 0.1)
    with probe.blast_receiver("", port) as blast, udp_from("127.0.0.1") as earlier:
        earlier.sendto(probe.HELLO, ("127.0.0.1", port))
        def serve_one() -> None:
            with conn:
                probe._serve_transfer(conn, blast, 20)

        served = threading.Thread(target=serve_one)
        served.start()
        sender.sendall(json.dumps({"pings": 1, "shape": True}).encode() + b"\n" + b"p")
        assert sender.recv(1) == b"p"
        sender.sendall(b"\0" * 1000)
        sender.shutdown(socket.SHUT_WR)
        ack = sender.recv(1)
        line = probe._account(sender, time.monotonic() + 10, line=True)
        answer = sender.recv(1)  # the hello's answer, with no hello sent
        account = probe._account(sender, time.monotonic() + 10, line=False)
        served.join(30)
    assert (ack, answer) == (b"k", b"n") and line["arrivals"][-1][1] == 1000
    assert account == {"received": 0, "arrival_s": None}


ANSWER_S = 60.0  # a serving probe's answer; none by then: the test fails, the probe killed


class Serving:
    """A `serve` probe in its own process: its first answer, then one answer per command, each
    read for at most ANSWER_S; `stop` ends its input and kills it if it has not ended 10 s later."""

    def __init__(self, timeout: float = 20, idle_s: float = 30) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "adrun.launch.nodes.probe", "serve",
                                      json.dumps({"timeout": timeout, "idle_s": idle_s})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.buffer = b""
        self.first = self.answer()

    def answer(self) -> dict:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + ANSWER_S
        while b"\n" not in self.buffer:
            if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError(f"the serving probe gave no answer within {ANSWER_S:.0f} s")
            data = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not data:
                raise EOFError("the serving probe ended without an answer")
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line.decode().removeprefix(probe.MARKER))

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def ask(self, args: dict) -> dict:
        self.write(json.dumps({"send": args}).encode() + b"\n")
        return self.answer()

    def stop(self) -> int | None:
        """Its exit code once its input ended; None: it had not ended 10 s later and was killed."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.proc.stdout.close()


@pytest.fixture
def serve_probes():
    """Makes `Serving` probes; each one is stopped (killed if need be) at the end."""
    made: list[Serving] = []

    def make(**args) -> Serving:
        made.append(Serving(**args))
        return made[-1]

    yield make
    for serving in made:
        if serving.proc.returncode is None:
            serving.stop()


def test_serving_probes_send_and_receive_many_transfers_answer_a_failed_one_and_end_with_their_input(serve_probes):
    sender, receiver = serve_probes(), serve_probes()
    first, second = sender.first, receiver.first
    assert first["port"] != second["port"] and first["boot_id"] == second["boot_id"] and first["cpus"] >= 1
    args = {"host": "127.0.0.1", "nbytes": NBYTES, "connect_timeout": 5, "timeout": 20, "pings": 2}
    answers = [sender.ask({**args, "port": second["port"], "shape": True}),
               sender.ask({**args, "port": free_ports(1)[0], "connect_timeout": 0.2}),  # nobody there
               sender.ask({**args, "port": second["port"], "shape": False})]
    assert [answer.get("bytes") for answer in answers] == [NBYTES, None, NBYTES]
    assert answers[0]["sent"] > 0 and "sent" not in answers[2] and len(answers[2]["rtt_s"]) == 2
    assert answers[1]["error"].startswith("ConnectionRefusedError")
    assert (sender.stop(), receiver.stop()) == (0, 0)


def test_a_command_line_split_across_writes_is_one_command(serve_probes):
    sender, receiver = serve_probes(), serve_probes()
    command = json.dumps({"send": {"host": "127.0.0.1", "port": receiver.first["port"], "nbytes": NBYTES,
                                   "connect_timeout": 5, "timeout": 20}}).encode() + b"\n"
    sender.write(command[:20])
    time.sleep(0.2)  # read by the probe as two parts (the answer does not depend on it)
    sender.write(command[20:])
    assert sender.answer()["bytes"] == NBYTES
    assert sender.stop() == 0


def announced_by_hand(port: int, announcement: bytes) -> bytes:
    """What a `serve` probe sends back to a connection that sends only `announcement`."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(announcement)
        conn.shutdown(socket.SHUT_WR)
        return conn.recv(16)


@pytest.mark.parametrize("announcement", [b"[]\n", b'{"pings": null}\n', b'{"pings": 1, "shape": "yes"}\n',
                                          b'{"pings": -1}\n', b"not json\n", b"[" * 1023 + b"\n"])
def test_a_connection_that_is_no_sender_of_ours_is_dropped_and_the_probe_serves_on(serve_probes, announcement):
    sender, receiver = serve_probes(), serve_probes()
    assert announced_by_hand(receiver.first["port"], announcement) == b""  # closed, no ack
    answer = sender.ask({"host": "127.0.0.1", "port": receiver.first["port"], "nbytes": NBYTES,
                         "connect_timeout": 5, "timeout": 20})
    assert answer["bytes"] == NBYTES
    assert (sender.stop(), receiver.stop()) == (0, 0)


def test_a_silent_connection_holds_the_probe_no_longer_than_an_announcement_takes(serve_probes):
    """A connection that sends nothing is dropped after ANNOUNCE_S, not the transfer's timeout (60 s
    here): a transfer queued behind it, bounded by 10 + ANNOUNCE_S s, is then received."""
    sender, receiver = serve_probes(), serve_probes(timeout=60)
    with socket.create_connection(("127.0.0.1", receiver.first["port"]), timeout=30):
        answer = sender.ask({"host": "127.0.0.1", "port": receiver.first["port"], "nbytes": NBYTES,
                             "connect_timeout": 5, "timeout": 10 + probe.ANNOUNCE_S, "pings": 1})
    assert answer.get("bytes") == NBYTES, answer
    assert (sender.stop(), receiver.stop()) == (0, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel arrival times: Linux")
def test_the_receiver_keeps_the_kernels_arrival_times_at_each_share_of_the_stream():
    """A receiver that read the stream's middle 150 ms late (reads of what came meanwhile, each
    timed as the last packet it took arrived) keeps the kernel's times, not its own: its arrivals at
    each 1/ARRIVAL_WINDOWS of the bytes lie on the link's line, and the trace holds the first TRACE_S."""
    rate, packet = 12e6, 1500
    times = [1000.0 + i * packet / rate for i in range(4000)]  # 0.5 s of a link at `rate`
    batches = [[(t, packet)] for t in times if t < 1000.1] + [[(t, packet) for t in times if 1000.1 <= t < 1000.25]] + \
              [[(t, packet)] for t in times if t >= 1000.25]
    trace: list = []
    total, arrivals = probe._stream(TimedConnection(batches), time.monotonic() + 10, trace)
    assert total == 4000 * packet and arrivals[-1][1] == total
    assert len(arrivals) == probe.ARRIVAL_WINDOWS + 1 and arrivals[0] == [0.0, packet]  # 1 byte, then its rest
    for seconds, nbytes in arrivals:  # on the link's line: every packet counted as it arrived
        assert seconds * rate <= nbytes <= seconds * rate + packet + 1e-3
    assert trace[-1][0] > probe.TRACE_S >= trace[-2][0] and trace[0] == [0.0, packet]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel arrival times: Linux")
def test_a_clump_of_packets_timed_at_once_is_one_arrival():
    """A busy machine's receive work times what waited at once: the reads of one time are one
    arrival, the bytes of the last (the rate's windows then span the time since the clump before)."""
    packet = 1500
    clumps = [[(1000.0 + 0.03 * k, packet)] * 200 for k in range(20)]  # 300,000 bytes each 30 ms, 5 reads each
    trace: list = []
    total, arrivals = probe._stream(TimedConnection(clumps), time.monotonic() + 10, trace)
    assert total == 20 * 200 * packet
    assert arrivals == [[pytest.approx(0.03 * k), 200 * packet * (k + 1)] for k in range(20)]
    assert trace == arrivals[:8]  # the burst's trace too (link_shape.py): up to the first past TRACE_S


class RefusingConnection(TimedConnection):
    """A connection whose kernel refuses SO_TIMESTAMPNS; its reads then come without times."""

    def setsockopt(self, level: int, option: int, value: int) -> None:
        raise OSError(errno.ENOPROTOOPT, "Protocol not available")

    def recv(self, size: int) -> bytes:
        return self.recvmsg(size, 0)[0]


def test_a_kernel_that_refuses_arrival_times_leaves_the_stream_counted_without_them():
    total, arrivals = probe._stream(RefusingConnection([[(1000.0, 1500)] * 100]), time.monotonic() + 10, [])
    assert (total, arrivals) == (150_000, [])


@pytest.mark.parametrize(("stamp", "seconds"), [(struct.pack("qq", 1000, 500_000_000), 1000.5),
                                                (struct.pack("ii", 1000, 250_000_000), 1000.25)],
                         ids=["64-bit", "32-bit"])
def test_a_kernel_arrival_time_is_read_from_either_timespec(stamp, seconds):
    assert probe._arrival([(socket.SOL_SOCKET, probe.SO_TIMESTAMPNS, stamp)]) == seconds


def test_a_stream_without_the_shape_stage_brings_the_receivers_arrivals():
    """The loopback's transfer (no `shape`): the receiver's account follows its acknowledgement."""
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "adrun.launch.nodes.probe", "recv",
                             json.dumps({"port": port, "timeout": 20})], stdout=subprocess.PIPE, text=True)
    try:
        result = probe.send({"host": "127.0.0.1", "port": port, "nbytes": NBYTES, "connect_timeout": 10,
                             "timeout": 20})
    finally:
        proc.communicate(timeout=30)
    assert result["bytes"] == NBYTES and "trace" not in result["receiver"] and "sent" not in result
    if sys.platform.startswith("linux"):
        assert result["receiver"]["arrivals"][-1][1] == NBYTES and len(result["receiver"]["arrivals"]) >= 2
