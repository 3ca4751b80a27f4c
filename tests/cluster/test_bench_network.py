"""bench/cluster's network pieces on real namespace hosts: a shaped link carries its profile's rate,
and the byte counters count a known transfer (plus only its headers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.cluster.network import PROFILES, apply_profile, read_counters

from tests.cluster.netns import NetnsCluster, NetnsHost

pytestmark = pytest.mark.cluster
PORT = 5301
TRANSFER_TIMEOUT = 60
# Receives one connection, prints the bytes read and the seconds from the first byte to the end.
RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(); print("up", flush=True)
conn, _ = s.accept(); total, first = 0, None
while chunk := conn.recv(1 << 16):
    first = first or time.perf_counter(); total += len(chunk)
print(total, time.perf_counter() - first, flush=True)
"""
SENDER = "import socket, sys; c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); c.sendall(bytes(int(sys.argv[3]))); c.close()"


def transfer(src: NetnsHost, dst: NetnsHost, nbytes: int) -> float:
    """Send `nbytes` over TCP from `src` to `dst`; the receiver's seconds from first byte to end."""
    receiver = subprocess.Popen(dst.exec_argv(sys.executable, "-c", RECEIVER, dst.address, str(PORT)),
                                stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "up"
        subprocess.run(src.exec_argv(sys.executable, "-c", SENDER, dst.address, str(PORT), str(nbytes)),
                       check=True, timeout=TRANSFER_TIMEOUT)
        received, seconds = receiver.stdout.readline().split()
        assert int(received) == nbytes
        return float(seconds)
    finally:
        receiver.kill()
        receiver.wait()


def test_commodity_link_carries_100_mbit(netns_cluster: NetnsCluster):
    profile = PROFILES["commodity"]
    apply_profile(netns_cluster, profile)
    try:
        nbytes = 6_000_000  # ~0.5 s at 100 Mbit/s, long enough that the token bucket's burst does not count
        seconds = transfer(*netns_cluster.hosts[:2], nbytes)
    finally:
        for host in netns_cluster.hosts:
            netns_cluster.unshape(host)
    mbit = nbytes * 8 / seconds / 1e6
    print(f"shaped to {profile.rate_mbit:g} Mbit/s, measured {mbit:.1f} Mbit/s")
    assert abs(mbit - profile.rate_mbit) <= 0.2 * profile.rate_mbit


def test_counters_count_a_known_transfer(netns_cluster: NetnsCluster):
    src, dst = netns_cluster.hosts[:2]
    nbytes = 3_000_000
    before = [read_counters(src), read_counters(dst)]
    transfer(src, dst, nbytes)
    after = [read_counters(src), read_counters(dst)]
    sent = after[0].sent - before[0].sent
    received = after[1].received - before[1].received
    acks = after[1].sent - before[1].sent
    print(f"payload {nbytes}, sent {sent}, received {received}, acknowledgements {acks}")
    # Ethernet + IP + TCP headers add ~66 B per segment of up to 64 KiB (GSO) or 1448 B: at most ~5%
    for counted in (sent, received):
        assert nbytes <= counted <= 1.06 * nbytes
    assert acks < 0.06 * nbytes
