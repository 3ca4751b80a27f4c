"""A transfer's result as the probe's sender reports it (launch/nodes/transfer.py), with shells
that answer as the probes would: what the `shape` stage measured, or why it failed."""

from __future__ import annotations

import json
import math
import sys
import time
from types import SimpleNamespace

import pytest

from adrun.launch.nodes import probe
from adrun.launch.nodes.transfer import MIN_WINDOWS, Endpoint, measure_transfer, sent_transfer, steady_rate
from adrun.spec import Node
from tests.support.timed_connection import TimedConnection


class ProbeShell:
    """A node's shell whose every command prints the probe result line `result`."""

    def __init__(self, result: dict) -> None:
        self.result = result

    def run(self, command: str, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(returncode=0, stdout=probe.MARKER + json.dumps(self.result) + "\n", stderr="")


def endpoint(address: str, result: dict) -> Endpoint:
    return Endpoint(Node(address=address, chief=address.endswith(".1")), ProbeShell(result), False)


STREAM = {"bytes": 4_000_000, "seconds": 2.0, "rtt_s": [0.01, 0.03, 0.02]}


@pytest.mark.parametrize(("shape", "error"), [
    ({"receiver": {"arrivals": [], "trace": [[0, 1000]], "received": 50, "arrival_s": 0.2}, "sent": 100, "send_s": 0.1},
     None),
    ({"shape_error": "TimeoutError: no answer to the UDP hello"}, "TimeoutError: no answer to the UDP hello"),
], ids=["measured", "failed"])
def test_the_shape_stage_is_carried_measured_or_with_why_it_failed(shape, error):
    done = measure_transfer(endpoint("10.0.0.1", {**STREAM, **shape}), endpoint("10.0.0.2", {"bytes": 4_000_000}),
                            "10.0.0.2", 1 << 26, pings=3, shape=True)
    assert (done.bytes_per_s, done.latency_s, done.shape_error) == (2e6, 0.01, error)
    assert (done.blast is None) == (error is not None)


RATE = 95.6e6 / 8  # a 100 Mbit/s shaper's payload bytes a second
MSS = 1448
BUCKET = 62_679


def shaped_reads(seconds: float, *, idle: tuple[float, float] | None = None,
                 paused: tuple[float, float] | None = None, bucket: int = BUCKET) -> list[list[float]]:
    """What a receiving probe records of a stream through a token bucket shaper at RATE: [kernel
    arrival time of a read's last packet, bytes by then] for each read. The sender keeps the link
    busy for `seconds` except while `idle` (start, seconds: the sender descheduled with its send
    buffer empty; the bucket refills meanwhile and passes a burst after); the receiver reads each
    packet as it comes except while `paused` (start, seconds: descheduled), after which one read
    takes all that arrived meanwhile, timed as its last packet arrived. The bucket holds `bucket`."""
    t, total, tokens, reads = 0.0, 0, float(bucket), []
    while t <= seconds:
        if idle and idle[0] <= t < idle[0] + idle[1]:
            tokens = min(bucket, tokens + RATE * (idle[0] + idle[1] - t))
            t = idle[0] + idle[1]
        dt = 1e-6 if tokens >= MSS else (MSS - tokens) / RATE
        t, tokens = t + dt, min(bucket, tokens + RATE * dt) - MSS
        total += MSS
        if paused and paused[0] <= t < paused[0] + paused[1] and reads:
            reads[-1] = [t, total]  # the read after the pause takes this packet too
        else:
            reads.append([t, total])
    return [[at - reads[0][0], got] for at, got in reads]


def clumped(reads: list[list[float]], every_s: float) -> list[list[float]]:
    """The arrivals a receiving probe keeps (probe.py `_stream`) of `reads` when the receiving
    machine is busy: its receive work runs every `every_s` and times all the packets that waited at
    once, which the probe then reads in reads of at most 64 KiB, all of that one time."""
    clumps: dict[float, list[tuple[float, int]]] = {}
    before = 0
    for at, got in reads:
        late = 1000 + math.ceil(at / every_s) * every_s
        clumps.setdefault(late, []).append((late, int(got) - before))
        before = int(got)
    total, arrivals = probe._stream(TimedConnection(list(clumps.values())), time.monotonic() + 10, [])
    assert total == before
    return arrivals


def probe_result(reads: list[list[float]], late_s: float, arrivals: list[list[float]] | None = None) -> dict:
    """The sender's result for the stream of `reads`, its clock stopped `late_s` after the last
    packet arrived (the receiver and the sender waking for the acknowledgement), and the receiver's
    `arrivals` (by default as probe.py thins `reads`)."""
    total = int(reads[-1][1])
    return {"bytes": total, "seconds": reads[-1][0] + late_s, "rtt_s": [2e-4],
            "receiver": {"arrivals": probe._thinned(reads, total) if arrivals is None else arrivals}}


@pytest.mark.parametrize(("idle", "paused", "late_s"), [
    (None, None, 0.0),
    ((0.2, 0.05), None, 0.0),
    ((0.2, 0.2), None, 0.0),
    (None, (0.1, 0.15), 0.08),
    ((0.3, 0.1), (0.1, 0.1), 0.1),
], ids=["busy", "sender-idle-50ms", "sender-idle-200ms", "receiver-paused-late-ack", "both"])
def test_the_rate_is_the_links_whenever_the_probes_were_descheduled(idle, paused, late_s):
    """A 0.5 s stream through a shaper at RATE reads RATE within 1 % whether the sender left the
    link idle for up to 200 ms, the receiver read late, or the acknowledgement came late: the
    stream's bytes over the sender's time to the acknowledgement read 8 to 38 % low here."""
    reads = shaped_reads(0.5, idle=idle, paused=paused)
    done = sent_transfer(with_shape(probe_result(reads, late_s), reads))
    assert done.bytes_per_s == pytest.approx(RATE, rel=0.01)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel arrival times: Linux")
@pytest.mark.parametrize("every_s", [0.01, 0.02, 0.05])
@pytest.mark.parametrize("idle", [None, (0.1, 0.05), (0.2, 0.1)])
def test_the_rate_is_the_links_when_the_receiving_kernel_times_packets_in_clumps(every_s, idle):
    """Clumps every 10 to 50 ms (the receive work of a busy machine; seen under load as successive
    reads of one time), the sender idle or not: RATE within 1 %. The first version of this rate
    (a window per 1/64 of the bytes, reads of one time each their own arrival) read 12 to 55 % of it
    at 20 to 50 ms (and with the sender idle 100 ms at 10 ms), the sender's time to an
    acknowledgement 50 ms late 75 to 92 %."""
    reads = shaped_reads(0.5, idle=idle)
    done = sent_transfer(with_shape(probe_result(reads, 0.05, clumped(reads, every_s)), reads))
    assert done.bytes_per_s == pytest.approx(RATE, rel=0.01)


def with_shape(result: dict, reads: list[list[float]]) -> dict:
    """`result` with the `shape` stage as a shaper answers it: the trace of `reads`' first TRACE_S
    and a blast that filled a queue (so that the trace's burst counts, link_shape.py)."""
    rate = result["bytes"] / result["seconds"]
    trace = [read for read in reads if read[0] <= probe.TRACE_S]
    return {**result, "sent": math.ceil(rate / probe.DATAGRAM), "send_s": 0.05,  # 20x the stream's rate
            "receiver": {**result["receiver"], "trace": trace, "received": math.ceil(0.1 * rate / probe.DATAGRAM),
                         "arrival_s": 0.1}}


@pytest.mark.parametrize(("seconds", "bucket"), [(0.1, BUCKET), (0.5, 7_900_000)], ids=["5%", "57%"])
def test_the_bucket_s_burst_is_no_part_of_the_rate(seconds, bucket):
    """A stream whose first `bucket` bytes pass at once reads RATE: 5 % of a 0.1 s stream (the old
    rate's burst correction, without which it read 5 % fast) and 57 % of a 0.5 s one, which the
    median of the windows read 121 times too fast (it passes over a burst only while it covers
    fewer than half of them): the windows start past the burst the shape stage measured."""
    reads = shaped_reads(seconds, bucket=bucket)
    done = sent_transfer(with_shape(probe_result(reads, 0.0), reads))
    assert done.burst_bytes == pytest.approx(bucket, rel=0.01)
    assert reads[-1][1] / reads[-1][0] > 1.04 * RATE
    assert done.bytes_per_s == pytest.approx(RATE, rel=0.01)


def test_without_the_receivers_arrivals_the_rate_is_the_senders_less_the_burst():
    """No kernel times (not Linux), or the receiver's line lost: the stream's bytes less the burst
    over the sender's time (here 5 % of the stream)."""
    reads = shaped_reads(0.1)
    result = with_shape(probe_result(reads, 0.0, arrivals=[]), reads)
    done = sent_transfer(result)
    assert done.burst_bytes > 0.04 * result["bytes"] and done.bytes_per_s == pytest.approx(RATE, rel=0.01)
    assert steady_rate([]) is None and steady_rate([[0.0, 1], [0.1, 2e6]]) is None  # none past the first


def alternating(seconds: float, rates: tuple[float, float], every_s: float) -> list[list[float]]:
    """The reads of a stream whose rate alternates between `rates` every `every_s` (a loopback's
    or veth's, bound by the machine's CPUs): one read a millisecond."""
    reads, total = [[0.0, 1]], 1.0
    for ms in range(1, round(seconds * 1000) + 1):
        total += rates[int((ms - 1) / 1000 / every_s) % 2] / 1000
        reads.append([ms / 1000, total])
    return reads


@pytest.mark.parametrize("every_s", [0.01, 0.05, 0.1, 0.15])
def test_a_rate_that_varies_reads_its_mean_over_time(every_s):
    """2 and 1 GB/s alternating in equal times (0.6 s) is 1.5 GB/s, within 2 %: the median of the
    windows, which hold equal bytes and so are more in the fast periods, read 2.0."""
    reads = alternating(0.6, (2e9, 1e9), every_s)
    assert steady_rate(probe._thinned(reads, int(reads[-1][1]))) == pytest.approx(1.5e9, rel=0.02)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel arrival times: Linux")
@pytest.mark.parametrize("every_s", [0.07, 0.1])
def test_a_stream_starved_into_a_few_clumps_reads_their_span(every_s):
    """Clumps every 70 or 100 ms leave fewer than MIN_WINDOWS windows: the span of the arrivals
    past the first, RATE within 1 %, not the sender's time to an acknowledgement 50 ms late."""
    reads = shaped_reads(0.5)
    done = sent_transfer(with_shape(probe_result(reads, 0.05, clumped(reads, every_s)), reads))
    assert done.bytes_per_s == pytest.approx(RATE, rel=0.01)


@pytest.mark.parametrize(("windows", "rate"), [(MIN_WINDOWS, 1e7), (MIN_WINDOWS - 1, 7e6 / 1.1)])
def test_from_min_windows_on_a_pause_is_left_out_and_below_the_span_holds_it(windows, rate):
    """Windows of 1 MB in 0.1 s after the first arrival (and before the last), one of them in 0.5 s
    (a pause): with MIN_WINDOWS windows that one is left out (10 MB/s), with one fewer the span
    holds it."""
    times = [0.0, 0.05] + [0.05 + 0.1 * k + (0.4 if k > 2 else 0.0) for k in range(1, windows + 2)]
    arrivals = [[t, 1e6 * k] for k, t in enumerate(times)]
    assert steady_rate(arrivals) == pytest.approx(rate)


@pytest.mark.parametrize(("slow_windows", "rate"), [(1, 1e7), (2, 30e6 / 3.2)])
def test_one_slow_window_is_a_pause_and_several_are_the_rate(slow_windows, rate):
    """Thirty windows of 1 MB in 0.1 s, one or two of them in 0.2 s (twice as slow, under PAUSE):
    one alone is a pause, left out; two in a row are a slower period of the rate, counted."""
    seconds = [0.1] * 10 + [0.2] * slow_windows + [0.1] * (20 - slow_windows)
    times = [0.0, 0.01] + [0.01 + sum(seconds[:k]) for k in range(1, len(seconds) + 2)]
    arrivals = [[t, 1e6 * k] for k, t in enumerate(times)]
    assert steady_rate(arrivals) == pytest.approx(rate)


def stalled(seconds: float, rate: float, stall: tuple[float, float]) -> list[list[float]]:
    """The reads of an unshaped stream at `rate`, one a millisecond, that moved nothing while
    `stall` (start, seconds): a loopback whose CPUs were elsewhere."""
    reads, total = [[0.0, 1]], 1.0
    for ms in range(1, round(seconds * 1000) + 1):
        total += 0.0 if stall[0] <= (ms - 1) / 1000 < stall[0] + stall[1] else rate / 1000
        reads.append([ms / 1000, total])
    return reads


NO_QUEUE_SEEN = {"sent": 1000, "send_s": 0.1, "receiver": {"trace": [], "received": 1000, "arrival_s": 0.1}}


@pytest.mark.parametrize(("shape", "leaves_pauses_out"), [
    (None, False),
    ({"shape_error": "TimeoutError: no answer to the UDP hello"}, True),
    (NO_QUEUE_SEEN, True),
], ids=["loopback", "shape-stage-failed", "no-queue-seen"])
def test_a_pause_is_the_rate_on_the_loopback_only(shape, leaves_pauses_out):
    """A stream at 1 GB/s for 0.5 s that moved nothing for 0.1 s of it: on the loopback (no shape
    stage asked) the stall is the machine's rate, which its bytes over the whole time read (0.8
    GB/s; leaving the stall out read 1.0, a loopback under load up to 4.6x its arrivals' span).
    Between nodes (the shape stage asked, whether it failed or saw no queue, as a blast that
    under-delivers on a loaded machine sees none on a shaped link too) the stall is taken for the
    probes' scheduling."""
    reads = stalled(0.5, 1e9, (0.2, 0.1))
    result = probe_result(reads, 0.0)
    if shape is not None:
        result = {**result, **shape, "receiver": {**result["receiver"], **shape.get("receiver", {})}}
    done = sent_transfer(result)
    assert (done.blast is None) == (shape is None or "shape_error" in shape) and done.queue_seconds == 0
    assert done.bytes_per_s == pytest.approx(1e9 if leaves_pauses_out else 0.8e9, rel=0.02)
