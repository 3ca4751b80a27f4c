"""The benchmark's models (bench/workloads/models.py) loaded for tests, and the tiny sizes they use."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from bench.paths import WORKLOADS_DIR

# size flags of a model small enough for a test run (the defaults are the benchmark's sizes)
TINY = {
    "sparse": ["--vocab", "50", "--dim", "4", "--bag", "3", "--hidden", "8", "--classes", "5", "--batch-size", "4"],
    "dense": ["--image", "8", "--conv1", "2", "--conv2", "3", "--fc", "6", "--classes", "4", "--batch-size", "4"],
    "embed": ["--vocab", "60", "--dim", "4", "--bag", "3", "--hidden", "8", "--batch-size", "4"],
    "ncf": ["--users", "30", "--items", "20", "--dim", "4", "--hidden", "8", "--batch-size", "8"],
}
TINY["transformer"] = ["--vocab", "40", "--seq", "6", "--dim", "8", "--heads", "2", "--ff", "8", "--layers", "1",
                       "--classes", "3", "--batch-size", "4"]
RESULT_KEYS = {"workload", "worker", "steps", "seconds", "batch_size", "examples_per_s", "steps_per_s", "cpu_seconds"}


def load_workload_module(name: str):
    """bench/workloads/NAME.py under a module name of its own (the bench scripts import it as NAME,
    which must not shadow anything in the test process)."""
    module_name = f"bench_workloads_{name}"
    spec = importlib.util.spec_from_file_location(module_name, WORKLOADS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tiny_batch_size(name: str) -> int:
    return int(TINY[name][TINY[name].index("--batch-size") + 1])


def tiny_model(models, name: str):
    """The model built from TINY[name]'s size flags, and its batch size."""
    flags = TINY[name]
    sizes = {flag[2:].replace("-", "_"): int(value) for flag, value in zip(flags[::2], flags[1::2])
             if flag != "--batch-size"}
    return models.WORKLOADS[name](**sizes), tiny_batch_size(name)


def check_result_file(path: Path, workload: str, worker: int, steps: int, batch_size: int) -> None:
    """A result file as the benchmark reads it: exact keys, the timed steps, rates that agree with them."""
    result = json.loads(path.read_text())
    assert set(result) == RESULT_KEYS, path
    assert (result["workload"], result["worker"], result["steps"], result["batch_size"]) == (workload, worker, steps, batch_size)
    assert result["seconds"] > 0 and result["cpu_seconds"] > 0
    assert abs(result["steps_per_s"] * result["seconds"] - steps) < 1e-6 * steps
    assert abs(result["examples_per_s"] * result["seconds"] - steps * batch_size) < 1e-6 * steps * batch_size
