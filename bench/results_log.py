"""One benchmark invocation's entry, appended to its results file (a JSON list): what was
measured (`label`), when and on which machine, then the invocation's own figures."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any


def append_entry(out: Path, label: str, figures: dict[str, Any]) -> dict[str, Any]:
    """Append {label, when, machine, **figures} to the JSON list in `out` (created when missing);
    returns the entry."""
    entry = {"label": label, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "machine": platform.node(), **figures}
    results = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps([*results, entry], indent=1) + "\n")
    return entry
