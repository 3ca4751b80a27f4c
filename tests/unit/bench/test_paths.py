"""bench/paths.py: the repository's folders the benchmarks use, named once.

Before it, nine bench modules each worked the repository root out from their own file (two of them
one folder deeper than the rest) and joined "bench", "results", "plans" or "examples" onto it:
a module moved into or out of bench/cluster would have pointed at the wrong folder.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bench import paths

pytestmark = pytest.mark.timeout(30)

# run as plain scripts (`python FILE` on the namespace hosts, where `bench` is no package): they
# cannot import bench.paths
SCRIPT_FOLDERS = (paths.PEERS_DIR, paths.WORKLOADS_DIR)
ROOT_NAMES = {"bench", "examples"}  # a path joined with one of these starts from the repository root


def _package_modules() -> list[Path]:
    return sorted(p for p in paths.BENCH.rglob("*.py")
                  if p != Path(paths.__file__) and not any(p.is_relative_to(f) for f in SCRIPT_FOLDERS))


def _root_work(path: Path) -> list[str]:
    """Where `path`'s code works out a folder of the repository itself: `__file__`, `/ "bench"`, `/ "examples/..."`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name) and node.id == "__file__":
            found.append(f"{path.name}:{node.lineno} __file__")
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                and str(node.right.value).split("/")[0] in ROOT_NAMES):
            found.append(f"{path.name}:{node.lineno} / {node.right.value!r}")
    return found


def test_the_folders_are_the_repositorys():
    assert (paths.REPO / "setup.cfg").is_file()
    assert (paths.BENCH / "paths.py").is_file()
    assert (paths.RESULTS_DIR / "cluster.json").is_file()
    assert paths.PLANS_DIR.is_dir() and paths.PLANS_DIR.parent == paths.RESULTS_DIR
    assert (paths.WORKLOADS_DIR / "sparse.py").is_file()
    assert (paths.PEERS_DIR / "tf_ps.py").is_file()
    assert (paths.EXAMPLES_DIR / "embedding.py").is_file()


def test_no_other_bench_module_works_out_the_repositorys_folders():
    modules = _package_modules()
    assert {"run.py", "report.py", "cost_model_check.py", "wire_bytes.py"} <= {p.name for p in modules}
    assert [hit for path in modules for hit in _root_work(path)] == []


@pytest.mark.parametrize("name", ["hook_overhead", "strategies", "wire_bytes", "auto_start", "profile_time"])
def test_a_bench_script_run_as_a_file_says_how_to_run_it(name):
    """`python bench/NAME.py` puts bench/ rather than the root on sys.path, so `bench.paths` cannot be
    imported: the module says so in one line instead of a ModuleNotFoundError's traceback."""
    done = subprocess.run([sys.executable, str(paths.BENCH / f"{name}.py")], cwd=paths.REPO, capture_output=True,
                          text=True, timeout=20)
    assert (done.returncode, done.stderr) == (1, f"run from the repository root as python -m bench.{name}\n")
