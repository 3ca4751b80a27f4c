"""Each fact the launcher and the tasks share is written once (issue #11, "one source for each fact").

These read the source (no TensorFlow): a second definition of an exit code, of the metric line's
prefix or of a default time would let the two sides drift apart silently.

At the root of tests/unit: it reads the source of every package at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import adrun

pytestmark = pytest.mark.timeout(30)

ROOT = Path(adrun.__file__).resolve().parent.parent
SOURCE_DIRS = ("adrun", "launch", "strategies", "bench")


def _modules() -> list[Path]:
    return sorted(p for folder in SOURCE_DIRS for p in (ROOT / folder).rglob("*.py"))


def _module_constants(path: Path) -> list[tuple[str, object, int]]:
    """(name, literal value, line) of every module-level `NAME = <literal>` in `path`."""
    found = []
    for node in ast.parse(path.read_text(), str(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        if isinstance(value, ast.Constant):
            found += [(t.id, value.value, node.lineno) for t in targets if isinstance(t, ast.Name)]
    return found


def test_exit_codes_are_defined_only_in_exit_codes():
    """Before: 65 in restarts.py and runtime/patches.py, 130 in cli, registry and supervisor."""
    home = ROOT / "adrun" / "exit_codes.py"
    elsewhere = [f"{path.relative_to(ROOT)}:{line} {name} = {value}"
                 for path in _modules() if path != home
                 for name, value, line in _module_constants(path) if name.endswith("_EXIT_CODE")]
    assert elsewhere == []


def test_every_exit_code_is_distinct():
    codes = {name: value for name, value, _ in _module_constants(ROOT / "adrun" / "exit_codes.py")
             if name.endswith("_EXIT_CODE")}
    assert len(set(codes.values())) == len(codes), codes
    # the README's "Exit codes" paragraph names every code a user can see
    readme = (ROOT / "README.md").read_text()
    for name, code in codes.items():
        if code:
            assert f"{code} " in readme.split("- Exit codes:", 1)[1].split("\n\n", 1)[0], name


def test_the_event_prefix_is_written_once():
    """Tasks write their events with `adrun.task_events.encode` and the launcher reads them with
    its `decode` (before: each side had its own `METRIC_PREFIX = "@@ADRUN "`)."""
    from adrun.task_events import EVENT_PREFIX

    literals = [f"{path.relative_to(ROOT)}:{node.lineno}"
                for path in _modules()
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and node.value == EVENT_PREFIX]
    assert len(literals) == 1 and literals[0].startswith("adrun/task_events.py:"), literals


def test_public_constants_are_not_defined_twice():
    """A public module constant with one name in two modules is one fact written twice, unless the
    two name different things (listed here with why)."""
    different_facts = {
        "SCHEMA_VERSION": "the job record's and the run records' schemas version apart",
        "MARKER": "the remote agent's and the probe's output lines",
        "CONNECT_TIMEOUT": "an SSH connection and a measuring transfer's TCP connection",
    }
    seen: dict[str, list[str]] = {}
    for path in _modules():
        if path.relative_to(ROOT).parts[0] == "bench":  # scripts, each with its own settings
            continue
        for name, _, _ in _module_constants(path):
            if not name.startswith("_") and name.isupper():
                seen.setdefault(name, []).append(str(path.relative_to(ROOT)))
    twice = {name: where for name, where in seen.items() if len(where) > 1 and name not in different_facts}
    assert twice == {}


def test_the_cli_shows_the_launchers_defaults():
    """Before: `default=300` in the CLI and `STALL_TIMEOUT_S = 300.0` in the supervisor."""
    from adrun.cli import main
    from adrun.defaults import RESTART_BACKOFF_S, STALL_TIMEOUT_S

    options = {p.name: p.default for p in main.commands["run"].params}
    assert (options["stall_timeout"], options["restart_backoff"]) == (STALL_TIMEOUT_S, RESTART_BACKOFF_S)
    # ... and no field, parameter or argument of those names falls back to a number of its own
    names = {"stall_timeout_s", "restart_backoff_s"}
    literals = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg in names:
                pairs = [(node.arg, node.value)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
                pairs = [(node.target.id, node.value)]
            elif isinstance(node, ast.arguments):
                args = [*node.posonlyargs, *node.args]
                pairs = list(zip([a.arg for a in args[len(args) - len(node.defaults):]], node.defaults))
                pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            else:
                continue
            literals += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name, value in pairs
                         if name in names and isinstance(value, ast.Constant) and value.value is not None]
    assert literals == []
