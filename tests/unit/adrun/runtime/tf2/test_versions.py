"""TF2 mode's version pinning (adrun/runtime/tf2/versions.py): the installed versions pass, an
untested one is refused with a message naming found, tested and the setting, and a missing private
attribute is named."""

from __future__ import annotations

import sys
import types

import pytest

from adrun.env_vars import Settings
from adrun.errors import UserError
from adrun.runtime.tf2 import versions


def test_the_installed_versions_are_the_tested_ones_and_tensorflow_has_every_private_attribute():
    """Fails after an upgrade (CI installs the newest TensorFlow): run the TF2 tests on the new
    versions, then add them to versions.TESTED."""
    assert set(versions.installed_versions()) == {"tensorflow", "keras", "tf_keras"}
    versions.check_versions(allow_untested=False)


def test_an_untested_version_names_what_was_found_what_was_tested_and_the_setting(capsys):
    found = {"tensorflow": "2.22.0", "keras": "3.15.1", "tf_keras": "2.21.0"}
    with pytest.raises(UserError) as error:
        versions.check_versions(allow_untested=False, found=found)
    assert str(error.value) == (
        "TF2 mode was tested with tensorflow 2.21.x, keras 3.15.x, tf_keras 2.21.x, and found tensorflow 2.22.0. "
        "It patches private TensorFlow/Keras code, which may differ in other versions. Install a tested version, "
        "or set ADRUN_ALLOW_UNTESTED_VERSIONS=1 to try anyway")
    versions.check_versions(allow_untested=True, found=found)  # the setting lets it try, and it is said
    assert capsys.readouterr().err == "adrun: TF2 mode on untested tensorflow 2.22.0 (ADRUN_ALLOW_UNTESTED_VERSIONS=1)\n"


def test_every_private_attribute_adrun_touches_exists_in_the_installed_packages():
    import importlib

    for name in versions.PRIVATE_API:
        importlib.import_module(name)
    assert [missing for name in versions.PRIVATE_API for missing in versions.missing_attributes(name)] == []


@pytest.mark.parametrize("version, tested", [("3.15.1", True), ("3.15", True), ("3.150.0", False), ("3.1", False)])
def test_a_release_series_matches_by_major_and_minor(version, tested):
    assert (versions.untested({"keras": version}) == {}) is tested


def test_a_missing_private_attribute_is_named(monkeypatch):
    fake = types.ModuleType("keras.src.saving.saving_api")
    fake.save_model = fake.save_weights = fake.load_model = lambda *a: None
    monkeypatch.setitem(sys.modules, "keras.src.saving.saving_api", fake)
    with pytest.raises(UserError, match=r"TF2 mode needs keras\.src\.saving\.saving_api\.load_weights, which "
                                        r"this installation \(tensorflow 2\.21\.\d+, keras 3\.15\.\d+"):
        versions.check_module("keras.src.saving.saving_api")


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
