"""The launcher's one handler for Ctrl-C and SIGTERM (adrun/cli/interrupts.py): what a signal does
before a job, while it runs, and while its end is recorded; the handlers before it are restored."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from adrun.cli.interrupts import handling_interrupts

pytestmark = pytest.mark.timeout(30)


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    threading.Event().wait(5)  # the handler runs here (a raise ends the wait at once)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_before_a_job_a_signal_unwinds_the_command(signum):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(KeyboardInterrupt):
        with handling_interrupts():
            _signal_self(signum)
    assert {sig: signal.getsignal(sig) for sig in before} == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_while_a_job_runs_a_signal_sets_the_event_it_waits_on(signum):
    with handling_interrupts() as interrupts:
        with interrupts.handed_down() as interrupt:
            assert not interrupt.is_set()
            os.kill(os.getpid(), signum)  # delivered to this thread before kill returns
            assert interrupt.is_set()  # and nothing raised
        with pytest.raises(KeyboardInterrupt):  # the job is over: the command unwinds again
            _signal_self(signum)


def test_while_the_end_is_recorded_a_signal_does_nothing_and_the_next_command_starts_clear():
    with handling_interrupts() as interrupts:
        with interrupts.handed_down() as interrupt:
            interrupts.ignore()
            os.kill(os.getpid(), signal.SIGTERM)  # delivered to this thread before kill returns
            assert not interrupt.is_set()
    with handling_interrupts() as interrupts:
        with pytest.raises(KeyboardInterrupt):
            _signal_self(signal.SIGTERM)
