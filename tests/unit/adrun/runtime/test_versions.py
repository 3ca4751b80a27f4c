"""Version pinning of both runtimes (adrun/runtime/versions.py): the installed versions pass and
have every private attribute listed for graph mode and TF2 mode, an untested one is refused with a
message naming the mode, found, tested and the setting, and a missing private attribute is named."""

from __future__ import annotations

import sys
import types

import pytest

from adrun.env_vars import Settings
from adrun.errors import UserError
from adrun.runtime import versions
from adrun.runtime.versions import GRAPH, TF2


def test_the_installed_versions_are_the_tested_ones_and_tensorflow_has_every_private_attribute():
    """Fails after an upgrade (CI installs the newest TensorFlow): run the TF2 tests on the new
    versions, then add them to versions.TESTED."""
    assert set(versions.installed_versions()) == {"tensorflow", "keras", "tf_keras"}
    TF2.check_versions(allow_untested=False)
    GRAPH.check_versions(allow_untested=False)


@pytest.mark.parametrize("mode, tested", [(TF2, "tensorflow 2.21.x, keras 3.15.x, tf_keras 2.21.x"),
                                          (GRAPH, "tensorflow 2.21.x, tf_keras 2.21.x")], ids=["TF2", "graph"])
def test_an_untested_version_names_the_mode_what_was_found_what_was_tested_and_the_setting(capsys, mode, tested):
    found = {"tensorflow": "2.22.0", "keras": "3.15.1", "tf_keras": "2.21.0"}
    with pytest.raises(UserError) as error:
        mode.check_versions(allow_untested=False, found=found)
    assert str(error.value) == (
        f"{mode.mode} mode was tested with {tested}, and found tensorflow 2.22.0. "
        "It patches private TensorFlow/Keras code, which may differ in other versions. Install a tested version, "
        "or set ADRUN_ALLOW_UNTESTED_VERSIONS=1 to try anyway")
    mode.check_versions(allow_untested=True, found=found)  # the setting lets it try, and it is said
    assert capsys.readouterr().err == (
        f"adrun: {mode.mode} mode on untested tensorflow 2.22.0 (ADRUN_ALLOW_UNTESTED_VERSIONS=1)\n")


def test_graph_mode_does_not_check_keras_3():
    GRAPH.check_versions(allow_untested=False, found={"tensorflow": "2.21.3", "keras": "3.99.0", "tf_keras": "2.21.0"})
    with pytest.raises(UserError):
        TF2.check_versions(allow_untested=False, found={"tensorflow": "2.21.3", "keras": "3.99.0", "tf_keras": "2.21.0"})


def test_both_modes_check_tf_keras_only_once_the_script_imported_it(monkeypatch):
    """An untested tf_keras merely installed refuses neither a graph script nor a Keras 3 script
    that never imports it (TF2 mode patches tf_keras's modules only once they are imported)."""
    found = {"tensorflow": "2.21.3", "tf_keras": "2.99.0"}
    monkeypatch.delitem(sys.modules, "tf_keras", raising=False)
    GRAPH.check_versions(allow_untested=False, found=found)
    TF2.check_versions(allow_untested=False, found={**found, "keras": "3.15.0"})
    monkeypatch.setitem(sys.modules, "tf_keras", types.ModuleType("tf_keras"))
    with pytest.raises(UserError, match=r"^TF2 mode was tested with .*, and found tf_keras 2\.99\.0\. "):
        TF2.check_versions(allow_untested=False, found=found)
    with pytest.raises(UserError, match=r"^graph mode was tested with tensorflow 2\.21\.x, tf_keras 2\.21\.x, and "
                                        r"found tf_keras 2\.99\.0\. "):
        GRAPH.check_versions(allow_untested=False, found=found)
    with pytest.raises(UserError, match=r"found tf_keras 2\.99\.0\. "):
        GRAPH.check_series(("tf_keras",), allow_untested=False, found=found)
    GRAPH.check_series(("tensorflow",), allow_untested=False, found=found)


@pytest.mark.parametrize("mode", [GRAPH, TF2], ids=lambda mode: mode.mode)
def test_every_private_attribute_adrun_touches_exists_in_the_installed_packages(mode):
    import importlib

    for name in mode.private:
        importlib.import_module(name)
    assert [missing for name in mode.private for missing in mode.missing_attributes(name)] == []


@pytest.mark.parametrize("mode", list(versions.GRAPH_AT_IMPORT))
def test_what_capture_and_profile_check_at_import_is_part_of_graph_modes_registry(mode):
    at_import = versions.GRAPH_AT_IMPORT[mode]
    assert at_import.distributions == GRAPH.distributions
    assert all(set(names) <= set(GRAPH.private[module]) for module, names in at_import.private.items())
    assert "tensorflow.python.data.experimental.ops.distribute" not in at_import.private  # run mode's --shard-data
    assert "Graph._unsafe_unfinalize" not in at_import.private.get("tensorflow.python.framework.ops", ())
    # the capture-time apply_gradients patch asks it at every call (patches.py)
    assert "executing_eagerly_outside_functions" in at_import.private["tensorflow.python.framework.ops"]


def test_graph_modes_registry_names_the_control_input_edits_of_gradient_sync():
    assert {"Operation._remove_all_control_inputs", "Operation._add_control_inputs"} <= set(
        GRAPH.private["tensorflow.python.framework.ops"])


def test_an_attribute_set_on_instances_is_found_in_the_class_code_and_named_when_gone(monkeypatch):
    class Graph:
        def __init__(self):
            self._container = ""

    class Operation:
        pass

    fake = types.ModuleType("tensorflow.python.framework.ops")
    fake.Graph, fake.Operation = Graph, Operation
    monkeypatch.setitem(sys.modules, "tensorflow.python.framework.ops", fake)
    assert "tensorflow.python.framework.ops.Graph._container" not in GRAPH.missing_attributes(fake.__name__)
    fake.Graph = type("Graph", (), {"__init__": lambda self: None})
    missing = GRAPH.missing_attributes(fake.__name__)
    assert "tensorflow.python.framework.ops.Graph._container" in missing
    assert "tensorflow.python.framework.ops.Operation._remove_all_control_inputs" in missing


def test_an_attribute_set_inside_nested_code_of_a_method_is_found(monkeypatch):
    """`_container` set by a function nested in a method, or by a lambda in a comprehension there."""
    class Nested:
        def __init__(self):
            def setup():
                self._container = ""
            setup()

    class InComprehension:
        def reset(self):
            return [lambda: self._container for _ in ()]

    class Without:
        def __init__(self):
            self._other = ""

    fake = types.ModuleType("tensorflow.python.framework.ops")
    monkeypatch.setitem(sys.modules, "tensorflow.python.framework.ops", fake)
    for graph, found in ((Nested, True), (InComprehension, True), (Without, False)):
        fake.Graph = graph
        assert ("tensorflow.python.framework.ops.Graph._container" not in GRAPH.missing_attributes(fake.__name__)) \
            is found, graph.__name__


@pytest.mark.parametrize("version, tested", [("3.15.1", True), ("3.15", True), ("3.150.0", False), ("3.1", False)])
def test_a_release_series_matches_by_major_and_minor(version, tested):
    assert (TF2.untested({"keras": version}) == {}) is tested


def test_a_missing_private_attribute_is_named(monkeypatch):
    fake = types.ModuleType("keras.src.saving.saving_api")
    fake.save_model = fake.save_weights = fake.load_model = lambda *a: None
    monkeypatch.setitem(sys.modules, "keras.src.saving.saving_api", fake)
    with pytest.raises(UserError, match=r"TF2 mode needs keras\.src\.saving\.saving_api\.load_weights, which "
                                        r"this installation \(tensorflow 2\.21\.\d+, keras 3\.15\.\d+"):
        TF2.check_module("keras.src.saving.saving_api")


def test_a_missing_private_attribute_of_graph_mode_is_named(monkeypatch):
    fake = types.ModuleType("tf_keras.src.engine.training")
    fake.Model = type("Model", (), {"save": lambda self: None})
    monkeypatch.setitem(sys.modules, "tf_keras.src.engine.training", fake)
    with pytest.raises(UserError, match=r"^graph mode needs tf_keras\.src\.engine\.training\.Model\.save_weights, "
                                        r"which this installation \(tensorflow 2\.21\.\d+.*\) does not have; it was "
                                        r"tested with tensorflow 2\.21\.x, tf_keras 2\.21\.x$"):
        GRAPH.check_module("tf_keras.src.engine.training")


def test_the_setting_reaches_the_tasks_only_when_set():
    assert Settings(allow_untested_versions=True).to_env() == {"ADRUN_ALLOW_UNTESTED_VERSIONS": "1"}
    assert Settings.from_env(Settings(allow_untested_versions=True).to_env()).allow_untested_versions is True
    assert Settings().to_env() == {}


def test_an_around_installer_checks_its_module_before_patching_it(monkeypatch):
    from adrun.runtime.context import TaskContext
    from adrun.runtime.tf2.around import AROUND_PATCHES

    other_worker = TaskContext(mode="run", role="worker", task_index=1, num_workers=2, job_id="j", cluster={},
                               strategy_file=None, capture_out=None)
    monkeypatch.setitem(sys.modules, "keras.src.callbacks.tensorboard", types.ModuleType("tensorboard"))
    with pytest.raises(UserError, match=r"TF2 mode needs keras\.src\.callbacks\.tensorboard\.TensorBoard, which"):
        AROUND_PATCHES["keras.src.callbacks.tensorboard"](other_worker)
    assert {"keras.src.optimizers.base_optimizer", "keras.src.backend.tensorflow.trainer",
            "tensorflow.python.checkpoint.checkpoint_management"} <= set(AROUND_PATCHES)
