"""Results of `adrun cluster check`: the data, its JSON form, and the terminal table.

Kept apart from the probing so the CLI and the tests render results without touching any node.
This table is `cluster check`'s own; adrun/ui.py draws the run's view.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Row order of the table and key order of the JSON.
CHECKS: dict[str, str] = {
    "ssh": "ssh",
    "host_key": "host key",
    "python": "python",
    "versions": "versions",
    "script": "script",
    "ports": "ports",
    "exposure": "exposure",
    "cpus": "cpus",
    "memory": "memory",
    "gpus": "gpus",
    "disk": "disk",
    "clock": "clock",
    "bandwidth": "bandwidth",
}
_CELL_CHARS = 40  # a cell shows this much of a finding; failures are printed in full below
_MARK = {"pass": ("✓", "green"), "fail": ("✗", "bold red"), "skip": ("–", "dim")}

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class CheckResult:
    """One check on one node. `skip`: not applicable, or not runnable because an earlier check failed."""

    status: Status
    detail: str
    remedy: str | None = None

    def __post_init__(self) -> None:
        if (self.status == "fail") != (self.remedy is not None):
            raise ValueError("a failed check needs a remedy, and only a failed check has one")


@dataclass
class NodeReport:
    address: str
    local: bool  # checked on this machine, without SSH
    results: dict[str, CheckResult]

    @property
    def ok(self) -> bool:
        return all(r.status != "fail" for r in self.results.values())


@dataclass(frozen=True)
class PairBandwidth:
    """One measured direction between two nodes; `mbit_s` None means the transfer failed."""

    source: str
    target: str
    mbit_s: float | None
    error: str | None = None


@dataclass
class CheckReport:
    nodes: list[NodeReport]
    pairs: list[PairBandwidth] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every check of every node passed or did not apply; the CLI exits 0 only then."""
        return all(node.ok for node in self.nodes)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "nodes": [
                {"address": n.address, "local": n.local, "ok": n.ok,
                 "checks": {name: asdict(n.results[name]) for name in CHECKS if name in n.results}}
                for n in self.nodes
            ],
            "pairs": [asdict(p) for p in self.pairs],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)


def render(report: CheckReport, console: Console) -> None:
    """A row per check and a column per node (✓/✗ and the short finding), then one line per
    failure with its remedy. Checks as rows keep the table readable at 80 columns for a few
    nodes; wider clusters wrap inside cells rather than off the screen."""
    table = Table(title="cluster check", title_justify="left", show_lines=False)
    table.add_column("check", no_wrap=True, style="bold")
    for node in report.nodes:
        table.add_column(f"{node.address}\n(local)" if node.local else node.address, overflow="fold")
    for name, title in CHECKS.items():
        table.add_row(title, *(_cell(node.results.get(name)) for node in report.nodes))
    console.print(table)
    failures = [(n, name, n.results[name]) for n in report.nodes for name in CHECKS
                if name in n.results and n.results[name].status == "fail"]
    for node, name, result in failures:
        console.print(Text.assemble(("✗ ", "bold red"), (f"{node.address} {CHECKS[name]}: ", "bold"), result.detail))
        console.print(Text.assemble("    → ", result.remedy or ""))
    if report.ok:
        console.print(Text("✓ every check passed", style="green"))
    else:
        console.print(Text(f"✗ {len(failures)} check(s) failed", style="bold red"))


def _cell(result: CheckResult | None) -> Text:
    if result is None:
        return Text("–", style="dim")
    mark, style = _MARK[result.status]
    detail = result.detail if len(result.detail) <= _CELL_CHARS else result.detail[: _CELL_CHARS - 1] + "…"
    return Text.assemble((mark, style), " ", (detail, "dim" if result.status == "skip" else ""))
