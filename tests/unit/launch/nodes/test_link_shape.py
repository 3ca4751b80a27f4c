"""A shaped link's token bucket and queue from synthetic probe traces (launch/nodes/link_shape.py)."""

from __future__ import annotations

import random

import pytest

from adrun.launch.nodes.link_shape import MIN_QUEUE_S, OUTRAN, Blast, burst_bytes, queue_seconds
from adrun.launch.nodes.probe import DATAGRAM
from adrun.launch.nodes.transfer import Transfer

RATE = 11.95e6  # 100 Mbit/s of frames, in TCP payload bytes per second
BUCKET = 62_678  # tc tbf's 64 KiB burst, in payload bytes
CHUNK = 14_480  # ten full frames: what one read of a steady stream brings


def shaped_arrivals(seconds: float = 0.2, stall: tuple[float, float] | None = None, jitter_s: float = 0.0,
                    bucket: float = BUCKET) -> list[list[float]]:
    """A token bucket's output for a sender that always has data, except during `stall` (start,
    seconds), as the probe keeps it (seconds since the first arrival, bytes by then): CHUNK bytes
    each 10 us (line speed) while the bucket holds them, else as its tokens come at RATE; a stall
    refills the bucket, which then passes a burst again. Each arrival time moved by up to `jitter_s`."""
    rng = random.Random(7)
    trace, total, t, tokens = [], 0.0, 0.0, bucket
    while t <= seconds:
        if stall and stall[0] <= t < stall[0] + stall[1]:
            t = stall[0] + stall[1]
            tokens = min(bucket, tokens + RATE * stall[1])
            continue
        dt = 1e-5 if tokens + RATE * 1e-5 >= CHUNK else (CHUNK - tokens) / RATE
        t, tokens = t + dt, min(bucket, tokens + RATE * dt) - CHUNK
        total += CHUNK
        trace.append([t, total])
    return [[t - trace[0][0] + (rng.uniform(-jitter_s, jitter_s) if i else 0.0), b] for i, (t, b) in enumerate(trace)]


def test_the_bytes_above_the_rate_at_the_start_are_the_bucket():
    assert burst_bytes(shaped_arrivals()) == pytest.approx(BUCKET, rel=0.01)


def test_a_stall_and_the_burst_after_it_move_the_estimate_little():
    assert burst_bytes(shaped_arrivals(stall=(0.08, 0.03))) == pytest.approx(BUCKET, rel=0.05)


def test_jittered_arrival_times_move_the_estimate_little():
    assert burst_bytes(shaped_arrivals(jitter_s=5e-5)) == pytest.approx(BUCKET, rel=0.05)


def test_a_path_without_a_bucket_has_no_burst():
    """A plain bottleneck (a NIC's queue) passes its rate from the first byte: at most one read's
    bytes of quantization above the line."""
    assert burst_bytes(shaped_arrivals(bucket=0.0)) == pytest.approx(CHUNK)


def test_a_stream_slower_at_first_than_later_shows_no_burst():
    """Slow start below the rate (the line extended back starts below 0): 0, not a negative bucket."""
    trace = [[t / 1000, 3e6 * (t / 1000) ** 2 / 0.01 if t < 10 else RATE * (t / 1000) - 30_000]
             for t in range(1, 200)]
    assert burst_bytes(trace) == 0.0


def test_too_few_arrivals_after_the_burst_measure_no_burst():
    assert burst_bytes([[0.0, 60_000], [0.001, 70_000], [0.03, 400_000], [0.05, 600_000]]) == 0.0
    assert burst_bytes([]) == 0.0


def test_a_full_queue_delivers_after_the_sender_stopped_for_its_length():
    """100 Mbit/s, 50 ms queue: the blast sent in 1.2 ms arrives over 54.7 ms."""
    assert queue_seconds(Blast(sent=5000, send_s=0.0012, received=560, arrival_s=0.0547), RATE) == pytest.approx(0.0535)


@pytest.mark.parametrize("blast", [
    None,  # not measured
    Blast(sent=5000, send_s=0.0012, received=0, arrival_s=None),  # UDP filtered: nothing arrived
    Blast(sent=5000, send_s=0.0012, received=5000, arrival_s=0.0547),  # nothing lost: the queue never filled
    Blast(sent=55950, send_s=0.0814, received=9160, arrival_s=0.0773),  # unshaped veth: arrives as sent
    Blast(sent=55950, send_s=0.0814, received=9160, arrival_s=0.0814 + MIN_QUEUE_S / 2),  # scheduling noise
])
def test_a_blast_that_shows_no_full_queue_gives_0(blast):
    assert queue_seconds(blast, RATE) == 0.0


def test_a_blast_paced_by_the_senders_buffers_gives_0_not_its_excess():
    """1 Gbit/s, send buffers smaller than the queue: the sends blocked, so they went at the
    link's rate and the queue never filled; what the buffers held still arrives late."""
    rate = 10 * RATE
    paced = Blast(sent=52_000, send_s=0.5, received=51_000, arrival_s=0.55)
    assert (paced.sent * DATAGRAM / paced.send_s) / rate < OUTRAN
    assert queue_seconds(paced, rate) == 0.0
    assert queue_seconds(Blast(sent=52_000, send_s=0.02, received=6_000, arrival_s=0.06), rate) == pytest.approx(0.04)


def test_a_receiver_losing_datagrams_on_a_fast_unshaped_link_gives_0():
    """10 GbE, no shaper: the sender outran the NIC (its buffers drained 15 ms after its last
    send) and a Python receiver lost most datagrams; it got far less than the link's rate."""
    rate = 1.1e9
    dropped = Blast(sent=53_333, send_s=0.02, received=20_000, arrival_s=0.035)
    assert dropped.sent * DATAGRAM / dropped.send_s > OUTRAN * rate
    assert queue_seconds(dropped, rate) == 0.0


def test_a_transfer_gives_its_queue_in_bytes_of_its_rate_and_its_bucket_only_with_a_queue():
    full = Blast(sent=5000, send_s=0.0012, received=560, arrival_s=0.0547)
    shaped = Transfer(nbytes=int(RATE), seconds=1.0, rtt_s=[1e-4], trace=shaped_arrivals(), blast=full)
    assert shaped.burst_bytes == pytest.approx(BUCKET, rel=0.01)
    # the queue in bytes of the sustained rate: the stream's less its burst
    assert shaped.bytes_per_s == pytest.approx(RATE - shaped.burst_bytes)
    assert shaped.queue_bytes == pytest.approx(0.0535 * (RATE - shaped.burst_bytes))
    unshaped = Transfer(nbytes=int(RATE), seconds=1.0, rtt_s=[1e-4], trace=shaped_arrivals(),
                        blast=Blast(sent=5000, send_s=0.0012, received=5000, arrival_s=0.0012))
    assert (unshaped.queue_bytes, unshaped.burst_bytes) == (0.0, 0.0)
