"""A shaped link's token bucket and sender queue, from what a probe transfer saw (probe.py `shape`).

A token bucket shaper (tc tbf, a cloud VM's egress limit) passes `burst` bytes at once after an
idle moment, then its rate; what comes faster waits in its queue, up to `limit` bytes, and the
rest is dropped. The cost model reads both (strategies/facts.py `Link.burst_bytes`,
`Link.queue_bytes`). Two measurements give them, each robust to a busy machine:

- the queue: a UDP blast sent much faster than the link. Once the queue is full, it keeps
  delivering for queue / rate seconds after the sender stopped, so the receiver's arrival span
  exceeds the sender's send span by that long (both measured on their own clock; the one-way
  latency cancels). Credited only when the blast shows a full shaper: datagrams were lost (the
  queue overflowed), the sender outran the link (at least OUTRAN x the rate: a sender paced by
  its own send buffers never fills a queue bigger than them), the receiver got what a shaper
  passes in its arrival span (at least the rate times it, less DELIVERY_TOLERANCE; more where the
  stream fell short of a fast link's rate: a receiver that cannot keep up with a fast unshaped
  NIC loses datagrams too, but gets far less), and the
  excess is above MIN_QUEUE_S: a path without a shaper (loopback, an unshaped veth) delivers as
  fast as it is sent, and its excess is scheduling noise around 0. Anything else is 0, which
  the cost model reads as "no queue known": an unshaped path, UDP filtered, a link faster than
  the blast, or send buffers too small to hold the queue (probe.py `_blast_sockets`).
- the burst: the start of a TCP stream after an idle moment, as the kernel timestamped its
  arrivals. A bucket passes at most `burst` + rate x t bytes in the t seconds after it was full,
  and exactly that while the sender keeps up: the most bytes above the rate's line through the
  first arrival are the burst. The rate is the median slope between successive arrivals after
  the burst (exact on a shaper, which releases each packet as its tokens come), so a stall of
  either machine, or the burst the refilled bucket passes after it, moves it little; a stall only
  lowers the later arrivals, never above the bound. Only a path with a measured queue has a
  shaper; elsewhere the burst is 0.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .probe import DATAGRAM

MIN_QUEUE_S = 1e-3  # less queueing than this is a path without a shaper: 0
FIT_FROM_S = 0.02  # the rate is taken from arrivals after this (the burst itself is over by then)
MIN_SLOPES = 5  # fewer slopes between successive arrivals after it: no burst measured
OUTRAN = 2.0  # a blast sent slower than this times the link's rate was paced by the sender: no queue known
DELIVERY_TOLERANCE = 0.25  # a shaper delivers at least the rate x the arrival span, less this share


@dataclass(frozen=True)
class Blast:
    """A UDP blast (probe.py `_blast`): datagrams sent over `send_s` seconds of the sender's clock,
    received over `arrival_s` seconds of the receiver's kernel (None: none arrived)."""

    sent: int
    send_s: float
    received: int
    arrival_s: float | None


def queue_seconds(blast: Blast | None, bytes_per_s: float) -> float:
    """How long the path's sender queue holds when full, on a path whose stream ran at
    `bytes_per_s`: 0 when the blast shows no full shaper (module docstring)."""
    if blast is None or blast.arrival_s is None or not 0 < blast.received < blast.sent or blast.send_s <= 0:
        return 0.0
    if blast.sent * DATAGRAM / blast.send_s < OUTRAN * bytes_per_s:
        return 0.0
    if blast.received * DATAGRAM < (1 - DELIVERY_TOLERANCE) * bytes_per_s * blast.arrival_s:
        return 0.0
    excess = blast.arrival_s - blast.send_s
    return excess if excess > MIN_QUEUE_S else 0.0


def burst_bytes(trace: Sequence[Sequence[float]]) -> float:
    """The bytes above the rate's line at the stream's first arrival: `trace` is [seconds since
    the first packet arrived, bytes arrived by then]; 0 when too few arrivals came after
    FIT_FROM_S to know the rate."""
    later = [(float(t), float(b)) for t, b in trace if t >= FIT_FROM_S]
    slopes = [(b2 - b1) / (t2 - t1) for (t1, b1), (t2, b2) in itertools.pairwise(later) if t2 > t1]
    if len(slopes) < MIN_SLOPES:
        return 0.0
    rate = statistics.median(slopes)
    return max(0.0, max(float(b) - rate * float(t) for t, b in trace))
