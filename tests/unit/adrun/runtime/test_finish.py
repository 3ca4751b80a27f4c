"""The worker's half of the finish barrier (adrun/runtime/finish.py): after its last step it
reports `finished` and blocks on its release pipe until the launcher writes a line, or the pipe
ends (the launcher is gone)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from adrun.runtime import finish
from adrun.task_events import FinishedEvent, decode, encode


def test_the_finished_event_reads_back_as_sent():
    assert decode(encode(FinishedEvent(5))) == FinishedEvent(5)
    assert decode(encode(FinishedEvent(5)).replace('"step": 5', '"step": "5"')) is None


@pytest.mark.parametrize("release", ["a line", "the end of the pipe"])
def test_a_finished_worker_waits_until_released(monkeypatch, release):
    reported: list[object] = []
    monkeypatch.setattr(finish, "report", lambda event: reported.append(event) or True)
    read, write = os.pipe()
    waiter = threading.Thread(target=finish.wait_for_release, args=(read, 5, 0.0), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 30
    while not reported and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reported == [FinishedEvent(5)]
    assert waiter.is_alive()  # nothing on the pipe: it cannot have returned
    try:
        if release == "a line":
            os.write(write, b"release\n")  # the write end stays open: the line alone releases it
        else:
            os.close(write)
            write = -1
        waiter.join(timeout=30)
        assert not waiter.is_alive()
    finally:
        if write >= 0:
            os.close(write)


def test_a_worker_whose_finished_event_was_lost_does_not_wait(monkeypatch):
    """The launcher's clock starts with the event it hears: unheard, nobody would end the wait."""
    monkeypatch.setattr(finish, "report", lambda event: False)
    read, write = os.pipe()
    try:
        finish.wait_for_release(read, 5, 0.0)  # returns at once: nothing is ever written to the pipe
    finally:
        os.close(write)


def test_a_worker_waits_at_most_its_own_limit(monkeypatch):
    monkeypatch.setattr(finish, "report", lambda event: True)
    read, write = os.pipe()
    try:
        began = time.monotonic()
        finish.wait_for_release(read, 5, 0.2)  # nothing on the pipe, its write end open
        assert time.monotonic() - began >= 0.2
    finally:
        os.close(write)
