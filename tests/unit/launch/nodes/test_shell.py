"""Starting a command over SSH (launch/nodes/shell.py `SSHStarted`) with fake paramiko channels: a
node that never answers the exec is given up after the start's timeout with one clear error, and
`stop` never raises."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import paramiko
import pytest

from adrun.launch.nodes.shell import SSHStarted

NEVER_S = 30.0  # how long a silent fake waits at most: the old, unbounded start returned only then


class SilentChannel:
    """A session channel whose exec's answer never comes: as paramiko's, the wait ends with
    "Channel closed." when the channel is closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def exec_command(self, command: str) -> None:
        if self.closed.wait(NEVER_S):
            raise paramiko.SSHException("Channel closed.")

    def close(self) -> None:
        self.closed.set()


class ClosedChannel:
    """A channel whose connection went away: closing it raises `error`, as paramiko's may then."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def exec_command(self, command: str) -> None:
        pass

    def shutdown_write(self) -> None:
        raise OSError("Socket is closed")

    def exit_status_ready(self) -> bool:
        return False

    def close(self) -> None:
        raise self.error


def connection(channel) -> SimpleNamespace:
    transport = SimpleNamespace(open_session=lambda timeout: channel)
    return SimpleNamespace(client=SimpleNamespace(get_transport=lambda: transport))


def test_a_node_that_never_answers_the_exec_is_given_up_after_the_timeout():
    channel = SilentChannel()
    with pytest.raises(paramiko.SSHException) as failed:
        SSHStarted(connection(channel), "python3 -c ...", 0.2)  # type: ignore[arg-type]
    assert str(failed.value) == "no answer to starting the command within 0.2 s"
    assert channel.closed.is_set()


def test_a_start_answered_in_time_is_not_given_up():
    channel = SilentChannel()
    channel.exec_command = lambda command: None  # type: ignore[method-assign]
    started = SSHStarted(connection(channel), "python3 -c ...", 0.2)  # type: ignore[arg-type]
    threading.Event().wait(0.4)  # past the bound: it was cancelled
    assert started.channel is channel and not channel.closed.is_set()


@pytest.mark.parametrize("error", [OSError("Socket is closed"), paramiko.SSHException("Channel closed.")])
def test_stop_never_raises_when_the_connection_is_gone(error):
    started = SSHStarted(connection(ClosedChannel(error)), "python3 -c ...", 5)  # type: ignore[arg-type]
    started.stop(0.05)
