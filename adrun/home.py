"""Where adrun keeps its files on this machine, and who may read them: only the user running it.

What outlives one command (the job record, the run records) lives in `~/.adrun/` unless
`ADRUN_HOME` names another directory (tests point it at a temporary one); what belongs to one run
(its strategy document, sent to the same path on every node) in a directory of its own under
`runs_root()`. Both may hold what the user would not show others (command lines, paths, plans), so
directories adrun creates are 0700 and its databases 0600, and a run directory someone else owns
is refused rather than used.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path

from adrun.errors import UserError
from adrun.launch.nodes.node_tools import private_dir

HOME_ENV = "ADRUN_HOME"
DEFAULT_HOME = Path("~/.adrun")
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another process's write transaction


def adrun_home(env: Mapping[str, str] | None = None) -> Path:
    """`$ADRUN_HOME`, else ~/.adrun; created (0700) by whoever writes there first."""
    env = os.environ if env is None else env
    return Path(env.get(HOME_ENV) or DEFAULT_HOME).expanduser()


def runs_root() -> Path:
    """The directory of this user's run directories: `adrun-runs-<uid>` in the temp directory
    (TMPDIR, else /tmp), a path that exists on any node, since a run's files go to the same path
    on every node of the job. Not /tmp/adrun: that would shadow the package when cwd is /tmp."""
    return Path(tempfile.gettempdir()) / f"adrun-runs-{os.geteuid()}"


def run_dir(job_id: str) -> Path:
    """Job `job_id`'s own directory under `runs_root()`, created private (see `node_tools.private_dir`);
    UserError naming the directory when it is someone else's."""
    root = runs_root()
    for path in (root, root / job_id):  # the root first: nothing is created in someone else's
        problem = private_dir(str(path))
        if problem is not None:
            raise UserError(f"run directory refused: {problem}")
    return root / job_id


def connect_database(path: Path) -> sqlite3.Connection:
    """A connection to one of adrun's SQLite files (the job record, the run records), which
    only this user may read: its directory is created 0700 when missing (adrun's home is
    tightened to 0700 when it is ours), the file created 0600 (one of ours tightened to 0600);
    SQLite gives its journal the file's mode.

    Autocommit, because every store opens its own `BEGIN IMMEDIATE` transactions; another
    process's write is waited for up to BUSY_TIMEOUT_S. Raises OSError when the directory or the
    file cannot be made, sqlite3.Error as `sqlite3.connect`.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.parent.resolve() == adrun_home().resolve():
        _tighten(path.parent, 0o700)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    _tighten(path, 0o600)
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)


def _tighten(path: Path, mode: int) -> None:
    """chmod `path` to `mode` when it is ours and allows more (another user's file is left alone)."""
    st = path.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o777 & ~mode:
        os.chmod(path, mode)
