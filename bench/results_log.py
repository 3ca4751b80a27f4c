"""One benchmark invocation's entry, appended to its results file (a JSON list): what was
measured (`label`), when and on which machine, then the invocation's own figures."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
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


def run_labelled_hosts_benchmark(description: str, measure: Callable[[int, float, int], dict[str, Any]], *,
                                 out: Path, hosts: int, reps: int) -> None:
    """The command line of a namespace-hosts benchmark whose invocations accumulate in one file:
    `--hosts`, `--rate-mbit` (0: unshaped), `--reps`, `--label` (what is measured), `--out`; runs
    `measure(hosts, rate_mbit, reps)`, appends its figures under the label and prints its summary."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--hosts", type=int, default=hosts)
    parser.add_argument("--rate-mbit", type=float, default=100, help="0: unshaped")
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--label", required=True, help="what is measured, e.g. the commit")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args()
    entry = append_entry(args.out, args.label, measure(args.hosts, args.rate_mbit, args.reps))
    print(json.dumps({"label": args.label, **entry["summary"]}, indent=1))
