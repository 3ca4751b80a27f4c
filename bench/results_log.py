"""One benchmark invocation's entry, appended to its results file (a JSON list): what was
measured (`label`), when and on which machine, then the invocation's own figures."""

from __future__ import annotations

import json
import os
import platform
import sys
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


def write_invocation(out: Path, results: list[dict[str, Any]], **facts: Any) -> None:
    """Write one invocation of a loopback benchmark to `out` as {command, cpus, **facts, results}:
    its command line and the machine's CPU count beside its rows, so the file says how it was made."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "cpus": os.cpu_count(), **facts, "results": results},
                              indent=1) + "\n")
