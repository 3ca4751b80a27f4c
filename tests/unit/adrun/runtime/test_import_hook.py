"""How the import hook wires TF2 run mode (adrun/runtime/import_hook.py: _tf2_run_patches): the
version check first, each module's surroundings (around.py) before the core's patch of the same
module, and a UserError of any of them turned into the script's refusal."""

from __future__ import annotations

import pytest

from adrun.env_vars import Settings
from adrun.errors import UserError
from adrun.runtime import import_hook, refusal
from adrun.runtime.tf2 import around, install
from adrun.task_context import Mode, Role, TaskContext

CTX = TaskContext(mode=Mode.RUN, role=Role.WORKER, task_index=1, num_workers=2, job_id="j", cluster={},
                  settings=Settings.from_env({}))
OPTIMIZER = "keras.src.optimizers.base_optimizer"


def _run_all(found: dict) -> None:
    for listed in found.values():
        for patch in listed:
            patch()


def test_versions_first_then_each_modules_surroundings_before_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(around, "check_versions", lambda: calls.append("versions"))
    monkeypatch.setattr(around, "AROUND_PATCHES", {
        "tensorflow.python.checkpoint.checkpoint": lambda ctx: calls.append(("around tf", ctx.task_index)),
        OPTIMIZER: lambda ctx: calls.append(("around optimizer", ctx.task_index)),
    })
    monkeypatch.setattr(install, "patches", lambda mode: {
        "tensorflow": lambda: calls.append(f"core tf {mode}"), OPTIMIZER: lambda: calls.append(f"core optimizer {mode}")})
    found = import_hook._tf2_run_patches(CTX)
    assert list(found)[0] == "tensorflow"
    _run_all(found)
    assert calls == ["versions", "core tf run", ("around tf", 1), ("around optimizer", 1), "core optimizer run"]


def test_a_user_error_of_a_patch_is_the_scripts_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    refused: list[str] = []

    def untested() -> None:
        raise UserError("TF2 mode was tested with tensorflow 2.21.x, and found tensorflow 2.99.0")

    def refuse(message: str) -> None:
        refused.append(message)

    monkeypatch.setattr(around, "check_versions", untested)
    monkeypatch.setattr(around, "AROUND_PATCHES", {})
    monkeypatch.setattr(install, "patches", lambda mode: {})
    monkeypatch.setattr(refusal, "refuse", refuse)
    _run_all(import_hook._tf2_run_patches(CTX))
    assert refused == ["TF2 mode was tested with tensorflow 2.21.x, and found tensorflow 2.99.0"]
