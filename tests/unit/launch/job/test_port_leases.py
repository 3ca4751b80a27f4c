"""Kernel-chosen ports of two launchers on one machine: a port one was just given is never handed to
the other, even when the kernel offers it again (it is free until the first job's server binds it)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.launch.job import ports
from adrun.launch.job.port_leases import LEASE_S, LEASES_FILE, leases_dir
from adrun.launch.job.ports import OFFERS, allocate_ports
from adrun.spec import Node


class _Offered:
    """A probe socket on `port` as the kernel would hand one out."""

    def __init__(self, port: int) -> None:
        self.port = port

    def getsockname(self) -> tuple[str, int]:
        return "0.0.0.0", self.port

    def __enter__(self) -> _Offered:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """The ports the kernel offers next, in order (the test fills it); leases kept under tmp_path."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    offers: list[int] = []

    def claim(host: str, port: int) -> _Offered:
        return _Offered(port if port else offers.pop(0))

    monkeypatch.setattr(ports, "_claim", claim)
    return offers


def test_a_port_just_given_to_one_launcher_is_passed_over_by_the_next(kernel: list[int]) -> None:
    kernel += [40001, 40003, 40005]
    assert allocate_ports([Node(address="localhost", workers=1, ps=1)]) == [[40001, 40003]]
    kernel += [40003, 40001, 40007]  # free again: neither server listens yet
    assert allocate_ports([Node(address="localhost", workers=1, ps=0)]) == [[40005]]
    assert allocate_ports([Node(address="localhost", workers=1, ps=0)]) == [[40007]]


def test_a_lease_lapses_after_lease_s(kernel: list[int]) -> None:
    directory = leases_dir()
    directory.mkdir(mode=0o700)
    now = time.time()
    (directory / LEASES_FILE).write_text(json.dumps({"40001": now - LEASE_S - 1, "40003": now - LEASE_S + 60}))
    kernel += [40003, 40001]
    assert allocate_ports([Node(address="localhost", workers=1, ps=0)]) == [[40001]]
    assert set(json.loads((directory / LEASES_FILE).read_text())) == {"40001", "40003"}


def test_fixed_ports_are_used_whatever_a_lease_says_and_leased(kernel: list[int]) -> None:
    kernel += [40001]
    assert allocate_ports([Node(address="localhost", workers=1, ps=0)]) == [[40001]]
    kernel += [40003]
    assert allocate_ports([Node(address="localhost", workers=1, ps=0, base_port=40001),
                           Node(address="127.0.0.1", workers=1, ps=0)]) == [[40001], [40003]]


def test_a_launcher_offered_only_leased_ports_says_so(kernel: list[int]) -> None:
    kernel += [40001]
    allocate_ports([Node(address="localhost", workers=1, ps=0)])
    kernel += [40001] * OFFERS
    with pytest.raises(UserError, match=f"no free TCP port on localhost: the last {OFFERS} the system offered "
                                        "were just given to other adrun jobs"):
        allocate_ports([Node(address="localhost", workers=1, ps=0)])


def test_the_leases_are_this_users_alone(kernel: list[int]) -> None:
    leases_dir().mkdir(mode=0o755)
    kernel += [40001]
    allocate_ports([Node(address="localhost", workers=1, ps=0)])
    assert leases_dir().name == f"adrun-ports-{os.geteuid()}"
    assert stat.S_IMODE(leases_dir().stat().st_mode) == 0o700  # tightened, as run directories are
    assert stat.S_IMODE((leases_dir() / LEASES_FILE).stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory someone else's needs root")
def test_a_lease_directory_of_someone_else_is_refused(kernel: list[int]) -> None:
    leases_dir().mkdir()
    os.chown(leases_dir(), 12345, -1)
    with pytest.raises(UserError, match=f"port lease directory refused: {leases_dir()} belongs to uid 12345"):
        allocate_ports([Node(address="localhost", workers=1, ps=0)])
