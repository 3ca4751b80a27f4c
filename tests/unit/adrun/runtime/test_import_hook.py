"""How the import hook wires TF2 run mode (adrun/runtime/import_hook.py: _tf2_run_patches): the
version check first, each module's surroundings (around.py) before the core's patch of the same
module, and a UserError of any of them turned into the script's refusal; and graph mode's: its
private attributes checked before its patches (at import in capture and profile only those its
patches replace then), its versions too in run mode."""

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
    monkeypatch.setattr(versions.ModeApi, "check_series", lambda self, names: calls.append(names))
    monkeypatch.setattr(around, "AROUND_PATCHES", {
        "tensorflow.python.checkpoint.checkpoint": lambda ctx: calls.append(("around tf", ctx.task_index)),
        OPTIMIZER: lambda ctx: calls.append(("around optimizer", ctx.task_index)),
    })
    monkeypatch.setattr(install, "patches", lambda mode: {
        "tensorflow": lambda: calls.append(f"core tf {mode}"), OPTIMIZER: lambda: calls.append(f"core optimizer {mode}")})
    found = import_hook._tf2_run_patches(CTX)
    assert list(found)[0] == "tensorflow"
    _run_all(found)
    assert calls == ["versions", "core tf run", ("tf_keras",), ("around tf", 1), ("around optimizer", 1),
                     "core optimizer run"]


def test_a_tf2_run_checks_tf_keras_version_once_the_script_imports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import tensorflow` passed (tf_keras not yet imported: TF2.when_imported); an untested
    tf_keras is refused when the script imports it, not when it is merely installed."""
    import sys
    import types

    monkeypatch.setattr(versions, "installed_versions", lambda: {"tensorflow": "2.21.0", "tf_keras": "2.99.0"})
    monkeypatch.setattr(versions.ModeApi, "check_tensorflow", lambda self: None)
    monkeypatch.setattr(refusal, "refuse", _refuse)
    monkeypatch.setattr("adrun.runtime.context.current", lambda: CTX)
    monkeypatch.setattr(around, "AROUND_PATCHES", {})
    monkeypatch.setattr(install, "patches", lambda mode: {})
    monkeypatch.delitem(sys.modules, "tf_keras", raising=False)
    found = import_hook._tf2_run_patches(CTX)
    for patch in found["tensorflow"]:
        patch()
    monkeypatch.setitem(sys.modules, "tf_keras", types.ModuleType("tf_keras"))
    with pytest.raises(_Refused, match=r"^TF2 mode was tested with .*, and found tf_keras 2\.99\.0\. "):
        _run_all({"tf_keras": found["tf_keras"]})


def test_a_user_error_of_a_patch_is_the_scripts_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    refused: list[str] = []

    def untested() -> None:
        raise UserError("TF2 mode was tested with tensorflow 2.21.x, and found tensorflow 2.99.0")

    def refuse(message: str) -> None:
        refused.append(message)

    monkeypatch.setattr(versions.ModeApi, "check_versions", lambda self: untested())
    monkeypatch.setattr(versions.ModeApi, "check_series", lambda self, names: None)  # tf_keras's: tested
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


class _Refused(Exception):
    """Stands for the real refusal, which ends the process."""


def _refuse(message: str) -> None:
    raise _Refused(message)


@pytest.mark.parametrize("mode, refused", [(Mode.RUN, True), (Mode.CAPTURE, False), (Mode.PROFILE, False)])
def test_a_graph_run_checks_tf_keras_version_once_the_script_imports_it(
        monkeypatch: pytest.MonkeyPatch, mode: Mode, refused: bool) -> None:
    """Run mode checked the versions at `import tensorflow`, before tf_keras counted; capture and
    profile check them all once the script shows its kind (capture_and_exit, the profiler)."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "tf_keras", types.ModuleType("tf_keras"))
    monkeypatch.setattr(versions, "installed_versions", lambda: {"tensorflow": "2.21.0", "tf_keras": "2.99.0"})
    monkeypatch.setattr(refusal, "refuse", _refuse)
    monkeypatch.setattr("adrun.runtime.context.current", lambda: dataclasses.replace(CTX, mode=mode))
    if refused:
        with pytest.raises(_Refused, match=r"^graph mode was tested with tensorflow 2\.21\.x, tf_keras 2\.21\.x, "
                                           r"and found tf_keras 2\.99\.0\. "):
            import_hook.GRAPH_PATCHES["tf_keras"]()
    else:
        import_hook.GRAPH_PATCHES["tf_keras"]()


@pytest.mark.parametrize("mode", [Mode.CAPTURE, Mode.PROFILE])
def test_an_attribute_only_graph_run_mode_uses_refuses_a_graph_script_and_never_a_tf2_one(
        monkeypatch: pytest.MonkeyPatch, mode: Mode) -> None:
    """A TensorFlow without `Graph._unsafe_unfinalize` (graph_edit.py, run mode's graph edits), with
    the setting to try untested versions: at `import tensorflow`, which a TF2 script's capture and
    profile pass too, the patches go in; a graph script's first training Session (capture_and_exit)
    is refused, naming the attribute."""
    from tensorflow.python.framework import ops

    from adrun.runtime import capture

    installed: list[str] = []
    monkeypatch.delattr(ops.Graph, "_unsafe_unfinalize")
    monkeypatch.setattr(patches, "install", lambda: installed.append("install"))
    monkeypatch.setattr(refusal, "refuse", _refuse)
    allowed = dataclasses.replace(CTX, mode=mode, settings=Settings(allow_untested_versions=True))
    monkeypatch.setattr("adrun.runtime.context.current", lambda: allowed)
    import_hook.GRAPH_PATCHES["tensorflow"]()
    assert installed == ["install"]
    with pytest.raises(_Refused, match=r"^graph mode needs tensorflow\.python\.framework\.ops\.Graph\._unsafe_unfinalize, "
                                       r"which this installation \(tensorflow 2\.21\.\d+"):
        capture.capture_and_exit(ops.Graph(), "/nonexistent/never-written")


def test_an_attribute_graph_captures_patch_replaces_refuses_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorflow.python.client import session

    monkeypatch.delattr(session.BaseSession, "_make_callable_from_options")
    monkeypatch.setattr(patches, "install", lambda: pytest.fail("patched without its attribute"))
    monkeypatch.setattr(refusal, "refuse", _refuse)
    monkeypatch.setattr("adrun.runtime.context.current", lambda: dataclasses.replace(CTX, mode=Mode.CAPTURE))
    with pytest.raises(_Refused, match=r"^graph mode needs tensorflow\.python\.client\.session\.BaseSession\."
                                       r"_make_callable_from_options, "):
        import_hook.GRAPH_PATCHES["tensorflow"]()


def test_a_missing_attribute_of_graph_mode_refuses_before_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    refused: list[str] = []
    monkeypatch.setattr(versions.ModeApi, "check_module", lambda self, name: (_ for _ in ()).throw(
        UserError(f"{self.mode} mode needs {name}.OptimizerV2.apply_gradients")))
    monkeypatch.setattr(patches, "install_tf_keras", lambda: refused.append("patched"))
    monkeypatch.setattr(refusal, "refuse", refused.append)
    import_hook.GRAPH_PATCHES["tf_keras.src.optimizers.legacy.optimizer_v2"]()
    assert refused == ["graph mode needs tf_keras.src.optimizers.legacy.optimizer_v2.OptimizerV2.apply_gradients",
                       "patched"]  # the real refuse ends the process here: the patch never runs
