"""The ports this user's adrun launchers on this machine handed to their tasks lately, so two jobs
starting at once never get the same one.

Why: a launcher learns a free port by binding port 0, and releases it for a task's TF server,
which binds it seconds later, once it has imported TensorFlow. Meanwhile the kernel may offer the
same port to another launcher's bind (it picks at random in its ephemeral range), and the later
of the two servers fails to start. So every port handed out is written down with its time, and a
launcher takes no port written down less than LEASE_S ago. Once its server listens, no bind can
take the port anyway: a lease only has to outlast a start-up, so it is never released but lapses,
and a launcher killed with SIGKILL leaves nothing to clean up.

The leases are one JSON file in a directory only this user may use (`node_tools.private_dir`),
in the temp directory; it is read and rewritten under an exclusive flock.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from types import TracebackType

from adrun.errors import UserError

from ..nodes.node_tools import private_dir

LEASE_S = 300.0  # longer than any task's start-up (TF's import, its server's bind)
LEASES_FILE = "leases.json"


def leases_dir() -> Path:
    """This user's lease directory: `adrun-ports-<uid>` in the temp directory (TMPDIR, else /tmp)."""
    return Path(tempfile.gettempdir()) / f"adrun-ports-{os.geteuid()}"


class PortLeases:
    """The lease file, locked from `__enter__` to `__exit__`; `take` leases a port no other launcher
    holds a lease on, and `__exit__` writes the leases back (without the lapsed ones)."""

    def __init__(self) -> None:
        self._fd = -1
        self._now = 0.0
        self._leases: dict[int, float] = {}

    def __enter__(self) -> PortLeases:
        directory = leases_dir()
        problem = private_dir(str(directory))
        if problem is not None:
            raise UserError(f"port lease directory refused: {problem}")
        self._fd = os.open(directory / LEASES_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._now = time.time()
        self._leases = {port: at for port, at in _read(self._fd).items() if self._now - at < LEASE_S}
        return self

    def take(self, port: int) -> bool:
        """Lease `port` from now on; False (and nothing leased) when another lease on it runs."""
        if port in self._leases:
            return False
        self._leases[port] = self._now
        return True

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            text = json.dumps({str(port): at for port, at in sorted(self._leases.items())}).encode()
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text, 0)
        finally:
            os.close(self._fd)  # releases the flock


def _read(fd: int) -> dict[int, float]:
    """The leases in the file; an empty or unreadable file holds none (a lost lease only brings
    back the race it guards against, for one start-up)."""
    size = os.fstat(fd).st_size
    try:
        found = json.loads(os.pread(fd, size, 0)) if size else {}
        return {int(port): float(at) for port, at in found.items()}
    except (ValueError, AttributeError, TypeError):
        return {}
