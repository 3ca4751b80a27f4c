"""Where adrun keeps what outlives one command on this machine (the job record, the run records).

`~/.adrun/` unless `ADRUN_HOME` names another directory (tests point it at a temporary one).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "ADRUN_HOME"
DEFAULT_HOME = Path("~/.adrun")
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another process's write transaction


def adrun_home(env: Mapping[str, str] | None = None) -> Path:
    """`$ADRUN_HOME`, else ~/.adrun; created by whoever writes there first."""
    env = os.environ if env is None else env
    return Path(env.get(HOME_ENV) or DEFAULT_HOME).expanduser()


def connect_database(path: Path) -> sqlite3.Connection:
    """A connection to one of adrun's SQLite files (the job record, the run records).

    Autocommit, because every store opens its own `BEGIN IMMEDIATE` transactions; another
    process's write is waited for up to BUSY_TIMEOUT_S. Raises sqlite3.Error as `sqlite3.connect`.
    """
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
