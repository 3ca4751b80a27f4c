"""Layers point one way (docs/architecture.md, "Layers"): every module of adrun/, launch/ and
strategies/ belongs to one layer, and imports only from its own layer or lower ones. `launch` and
`runtime` stand side by side: neither imports the other (they meet in the contract below them).

Imports are read from the source with `ast`, including those inside functions, so nothing is
imported (and TensorFlow is never loaded) to check them.

At the root of tests/unit: it reads every module of the three packages at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (layer, rank, the modules it holds: a name or a package prefix ending in "."), lowest first
LAYERS = [
    ("core", 0, [  # shared data and names, no TensorFlow, nothing of adrun's stages
        "adrun", "adrun.defaults", "adrun.errors", "adrun.exit_codes", "adrun.env_vars", "adrun.model_io",
        "adrun.spec", "adrun.graph_item", "adrun.job_state", "adrun.task_events", "adrun.str_enum",
        "adrun.placement",
        "adrun.profile_samples",
    ]),
    ("strategies", 1, ["adrun.strategies", "adrun.strategies."]),  # plans: a GraphItem and a spec in, a Strategy out
    ("contract", 2, ["adrun.task_context"]),  # who a task is, written by launch and read by the runtime
    ("launch", 3, ["adrun.launch", "adrun.launch."]),  # starting, supervising, stopping tasks; returns data
    ("runtime", 3, ["adrun.runtime", "adrun.runtime.", "adrun.hook."]),  # inside every task
    ("services", 4, [  # the launching machine's work the commands compose; shows nothing
        "adrun.home",  # private directories through the node tools launch/ ships to every node
        "adrun.capture_run", "adrun.records", "adrun.records.", "adrun.jobs", "adrun.jobs.registry",
        "adrun.jobs.control", "adrun.jobs.logs", "adrun.profile", "adrun.profile.run", "adrun.profile.report", "adrun.profile.scaling", "adrun.profile.plot",
    ]),
    ("cli", 5, [  # the commands and the terminal
        "adrun.__main__", "adrun.cli", "adrun.cli.", "adrun.ui", "adrun.shown_job", "adrun.jobs.view",
        "adrun.profile.command", "adrun.profile.view", "adrun.profile.trials",
        "adrun.gathering",  # gathers a plan's facts (capture, profile, network) and says so through ui
    ]),
]


def module_name(path: Path) -> str:
    """`launch/job/plan.py` -> `adrun.launch.job.plan` (package_dir in setup.cfg)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "adrun":
        parts.insert(0, "adrun")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, Path]:
    return {module_name(path): path for folder in ("adrun", "launch", "strategies")
            for path in sorted((ROOT / folder).rglob("*.py"))}


def layer_of(module: str) -> tuple[str, int] | None:
    """The layer holding `module` (the longest matching entry wins), None when none does."""
    best: tuple[int, str, int] | None = None
    for name, rank, entries in LAYERS:
        for entry in entries:
            if module == entry or (entry.endswith(".") and module.startswith(entry)):
                if best is None or len(entry) > best[0]:
                    best = (len(entry), name, rank)
    return (best[1], best[2]) if best else None


def imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The adrun modules `path` imports anywhere in it (relative imports resolved)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # `from adrun import ui` imports the module adrun.ui
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name == "adrun" or name.startswith("adrun.")}


def violations(module: str, path: Path, known: set[str]) -> list[str]:
    """Each import of `module` (source at `path`) from a higher layer, or from a side-by-side one."""
    layer, rank = layer_of(module) or ("?", -1)
    wrong = []
    for target in sorted(imported(module, path, known)):
        target_layer, target_rank = layer_of(target) or ("?", 99)
        if target_layer != layer and target_rank >= rank:
            wrong.append(f"{module} ({layer}) imports {target} ({target_layer})")
    return wrong


def test_every_module_has_a_layer():
    assert [module for module in sources() if layer_of(module) is None] == []


def test_no_module_imports_from_a_higher_layer_or_a_side_by_side_one():
    known = set(sources())
    assert [wrong for module, path in sources().items() for wrong in violations(module, path, known)] == []


@pytest.mark.parametrize("module,source,expected", [
    ("adrun.runtime.metrics", "from adrun.launch.job.metrics import Throughput",
     "adrun.runtime.metrics (runtime) imports adrun.launch.job.metrics (launch)"),
    ("adrun.jobs.registry", "def warn():\n    from adrun import ui",
     "adrun.jobs.registry (services) imports adrun.ui (cli)"),
    ("adrun.launch.job.plan", "from ...runtime import context",
     "adrun.launch.job.plan (launch) imports adrun.runtime.context (runtime)"),
    ("adrun.task_events", "import adrun.launch.env", "adrun.task_events (core) imports adrun.launch.env (launch)"),
])
def test_the_check_sees_an_import_that_points_up(tmp_path, module, source, expected):
    """The rule above is only as good as its reading of imports: each of these is caught."""
    path = tmp_path / "probe.py"
    path.write_text(source + "\n")
    assert violations(module, path, set(sources())) == [expected]
