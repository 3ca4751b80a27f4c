"""How the import hook wires TF2 run mode (adrun/runtime/import_hook.py: _tf2_run_patches): the
version check first, each module's surroundings (around.py) before the core's patch of the same
module, and a UserError of any of them turned into the script's refusal; and graph mode's: its
private attributes checked before its patches, its versions too in run mode."""

from __future__ import annotations

import pytest

from adrun.env_vars import Settings
from adrun.errors import UserError
import dataclasses

from adrun.runtime import import_hook, patches, refusal, versions
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
    monkeypatch.setattr(versions.ModeApi, "check_versions", lambda self: calls.append("versions"))
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

    monkeypatch.setattr(versions.ModeApi, "check_versions", lambda self: untested())
    monkeypatch.setattr(around, "AROUND_PATCHES", {})
    monkeypatch.setattr(install, "patches", lambda mode: {})
    monkeypatch.setattr(refusal, "refuse", refuse)
    _run_all(import_hook._tf2_run_patches(CTX))
    assert refused == ["TF2 mode was tested with tensorflow 2.21.x, and found tensorflow 2.99.0"]


@pytest.mark.parametrize("mode, checks", [(Mode.RUN, ["graph versions"]), (Mode.CAPTURE, ["graph tensorflow"]),
                                          (Mode.PROFILE, ["graph tensorflow"])])
def test_graph_modes_tensorflow_patches_follow_its_checks(monkeypatch: pytest.MonkeyPatch, mode, checks) -> None:
    """Run mode knows the script is a graph script and checks its versions; capture and profile check
    the attributes the patches use, and the versions once the script shows its kind (capture.py)."""
    calls: list[str] = []
    monkeypatch.setattr(versions.ModeApi, "check_versions", lambda self: calls.append(f"{self.mode} versions"))
    monkeypatch.setattr(versions.ModeApi, "check_tensorflow", lambda self: calls.append(f"{self.mode} tensorflow"))
    monkeypatch.setattr(patches, "install", lambda: calls.append("install"))
    monkeypatch.setattr("adrun.runtime.context.current", lambda: dataclasses.replace(CTX, mode=mode))
    import_hook.GRAPH_PATCHES["tensorflow"]()
    assert calls == [*checks, "install"]


def test_a_missing_attribute_of_graph_mode_refuses_before_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    refused: list[str] = []
    monkeypatch.setattr(versions.ModeApi, "check_module", lambda self, name: (_ for _ in ()).throw(
        UserError(f"{self.mode} mode needs {name}.OptimizerV2.apply_gradients")))
    monkeypatch.setattr(patches, "install_tf_keras", lambda: refused.append("patched"))
    monkeypatch.setattr(refusal, "refuse", refused.append)
    import_hook.GRAPH_PATCHES["tf_keras.src.optimizers.legacy.optimizer_v2"]()
    assert refused == ["graph mode needs tf_keras.src.optimizers.legacy.optimizer_v2.OptimizerV2.apply_gradients",
                       "patched"]  # the real refuse ends the process here: the patch never runs
