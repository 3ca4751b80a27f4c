"""A loopback TCP forwarder that counts the bytes crossing it, to measure what a TensorFlow client
reads from a server without a shaped network: point the client's cluster address at the forwarder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.ports import free_ports

_CHUNK = 1 << 16


class CountingForwarder:
    """Accepts on 127.0.0.1:`port` and forwards each connection to 127.0.0.1:`target`; `received`
    counts the bytes the target sent back (what the client read), `sent` the client's bytes."""

    def __init__(self, port: int, target: int) -> None:
        self._target = target
        self._lock = threading.Lock()
        self.received = 0
        self.sent = 0
        self._listener = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._listener.accept()
            try:
                server = socket.create_connection(("127.0.0.1", self._target))
            except ConnectionRefusedError:  # the server is not up yet: the client reconnects
                client.close()
                continue
            for source, sink, to_client in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(source, sink, to_client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, to_client: bool) -> None:
        while data := source.recv(_CHUNK):
            with self._lock:
                if to_client:
                    self.received += len(data)
                else:
                    self.sent += len(data)
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)


def run_counted_ps_script(script: str, out: Path, cwd: Path) -> dict:
    """Run `script ps PORT` in the background and `script worker PS_PORT FORWARDER_PORT WORKER_PORT
    OUT` to its end (the worker reaches the PS through a CountingForwarder of its own); returns the
    byte counts the worker wrote to `out` as JSON. The PS is killed whatever happens."""
    ps_port, forwarder_port, worker_port = (str(p) for p in free_ports(3))
    env = {**os.environ, "PYTHONPATH": str(cwd), "TF_CPP_MIN_LOG_LEVEL": "2"}
    ps = subprocess.Popen([sys.executable, script, "ps", ps_port], cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        worker = subprocess.run([sys.executable, script, "worker", ps_port, forwarder_port, worker_port, str(out)],
                                cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
        assert worker.returncode == 0, worker.stderr[-3000:]
    finally:
        ps.kill()
        ps.wait()
    return json.loads(out.read_text())
