"""Where adrun keeps what outlives one command on this machine (the job record, the run records).

`~/.adrun/` unless `ADRUN_HOME` names another directory (tests point it at a temporary one).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "ADRUN_HOME"
DEFAULT_HOME = Path("~/.adrun")


def adrun_home(env: Mapping[str, str] | None = None) -> Path:
    """`$ADRUN_HOME`, else ~/.adrun; created by whoever writes there first."""
    env = os.environ if env is None else env
    return Path(env.get(HOME_ENV) or DEFAULT_HOME).expanduser()
