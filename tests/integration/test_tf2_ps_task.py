"""A TF2 plan's PS task survives a worker creating its eager context on it while another worker's
creation is under way (adrun/runtime/tf2/ps_task.py; docs/tf2-plans.md, "Known problems").

The interleaving that killed the PS task (about 1 job in 12-20) is made to happen, not waited for:
worker A's session config asks for TF's coordination service with health checks, whose leader is a
fake gRPC service in this test, so the PS's `CreateContext` for A holds (after A's EagerContext is
made, before it is registered) until the test answers the PS's `RegisterTask`. Worker B connects
and uses the PS meanwhile; then A is let through and uses the PS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from adrun.strategies.document import Strategy, dump_strategy
from adrun.task_context import Mode, Role, TaskContext
from tests.support.adrun_cli import new_job_id
from tests.support.paths import REPO, SCRIPTS
from tests.support.ports import free_ports

pytestmark = pytest.mark.timeout(600)

CLIENT = str(SCRIPTS / "tf2_ps_client.py")
TIMEOUT_S = 300  # a TF process's start on a loaded machine; every wait below ends at an event


class HeldLeader:
    """A coordination service leader that holds every `RegisterTask` until `release()`. It is also
    task `/job:coord/task:0` of A's view, so it answers what A's client asks of every task (device
    listing, context creation) with empty messages, which TF reads as nothing to report."""

    def __init__(self, port: int) -> None:
        self.registering = threading.Event()  # a task (the PS first) is inside RegisterTask
        self._released = threading.Event()
        self._closing = threading.Event()
        methods = {
            "tensorflow.CoordinationService": {name: self._answer for name in (
                "Heartbeat", "WaitForAllTasks", "ShutdownTask", "ResetTask", "ReportErrorToService",
                "GetTaskState", "InsertKeyValue", "GetKeyValue", "TryGetKeyValue", "GetKeyValueDir",
                "DeleteKeyValue", "Barrier", "CancelBarrier", "GetAliveTasks")}
            | {"RegisterTask": self._register, "PollForError": self._never},
            "tensorflow.WorkerService": {"GetStatus": self._answer},
            "tensorflow.eager.EagerService": {name: self._answer for name in (
                "CreateContext", "UpdateContext", "KeepAlive", "CloseContext", "WaitQueueDone", "Enqueue")},
        }
        self._server = grpc.server(futures.ThreadPoolExecutor(16))
        self._server.add_generic_rpc_handlers([
            grpc.method_handlers_generic_handler(service, {name: grpc.unary_unary_rpc_method_handler(handler)
                                                           for name, handler in handlers.items()})
            for service, handlers in methods.items()])
        self._server.add_insecure_port(f"localhost:{port}")
        self._server.start()

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._released.set()
        self._closing.set()
        self._server.stop(0)

    def _answer(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return b""

    def _register(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.registering.set()
        self._released.wait(TIMEOUT_S)
        return b""

    def _never(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self._closing.wait(TIMEOUT_S)
        return b""


@contextmanager
def ps_task(tmp_path: Path, kind: str, address: str) -> Iterator[subprocess.Popen[str]]:
    """adrun's PS task 0 (`python -m adrun.runtime.ps_server`, the launcher's command) of a plan of
    `kind`, once it says it serves; killed on the way out."""
    plan = tmp_path / "strategy.yml"
    dump_strategy(Strategy(version=1, kind=kind, builder="test", fingerprint="f", num_workers=2, num_ps=1,
                           variables=[]), plan)
    contract = TaskContext(mode=Mode.RUN, role=Role.PS, task_index=0, num_workers=2, job_id=new_job_id(),
                           cluster={"ps": [address]}, strategy_file=str(plan)).to_env()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ADRUN_")}, **contract}
    ps = subprocess.Popen([sys.executable, "-m", "adrun.runtime.ps_server"], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert ps.stdout is not None
        assert ps.stdout.readline() == f"ps0 serving at {address}\n"
        yield ps
    finally:
        ps.kill()
        ps.wait()


def client(ps_address: str, port: int, *leader: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, CLIENT, ps_address, str(port), *leader], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def connect_inside_another(tmp_path: Path, kind: str) -> tuple[str, str, int | None]:
    """(B's output, A's output, the PS task's exit status or None while it runs) after B connected
    and used the PS while A's context creation on it was held, then A was let through."""
    ps_port, a_port, b_port, leader_port = free_ports(4)
    address = f"localhost:{ps_port}"
    leader = HeldLeader(leader_port)
    a = None
    try:
        with ps_task(tmp_path, kind, address) as ps:
            a = client(address, a_port, f"localhost:{leader_port}")
            assert leader.registering.wait(TIMEOUT_S), "the PS never asked the leader to register it"
            assert a.poll() is None  # A's contexts are not there yet: the PS has not answered
            b_out = client(address, b_port).communicate(timeout=TIMEOUT_S)[0]
            leader.release()
            a_out = a.communicate(timeout=TIMEOUT_S)[0]
            # A fails only once the PS's sockets close: then the PS has died (wait reaps it)
            return b_out, a_out, ps.wait(TIMEOUT_S) if a.returncode else ps.poll()
    finally:
        if a is not None and a.poll() is None:
            a.kill()
            a.wait()
        leader.close()


def test_a_worker_connecting_while_another_does(tmp_path: Path) -> None:
    b_out, a_out, ps_exit = connect_inside_another(tmp_path, "tf2")
    assert b_out == "connected\nread [1.0, 2.0]\n"
    assert a_out == "connected\nread [1.0, 2.0]\n"
    assert ps_exit is None


@pytest.mark.full
def test_a_plain_server_dies_in_that_interleaving(tmp_path: Path) -> None:
    """TensorFlow's bug, the reason ps_task.py exists: a PS task served by `tf.distribute.Server`
    (graph-mode plans') dies by SIGSEGV at A's first op. When this fails, TF has fixed it."""
    b_out, a_out, ps_exit = connect_inside_another(tmp_path, "graph")
    assert b_out == "connected\nread [1.0, 2.0]\n"
    assert a_out == "connected\n"
    assert ps_exit == -signal.SIGSEGV
