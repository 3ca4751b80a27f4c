"""A loopback TCP forwarder that counts the bytes crossing it, to measure what a TensorFlow client
reads from a server without a shaped network: point the client's cluster address at the forwarder."""

from __future__ import annotations

import socket
import threading

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
