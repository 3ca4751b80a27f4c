"""replace_function puts adrun's wrapper wherever a loaded module of the package holds the original
(adrun/runtime/tf2/replace.py): `keras.models.load_model` is bound by `from ... import` before the
hook runs, and must not keep the unwrapped function."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from adrun.runtime.tf2.replace import replace_function


def _load_model(path: str) -> str:
    return f"loaded {path}"


@pytest.fixture
def fake_keras() -> Iterator[dict[str, types.ModuleType]]:
    """`fakekeras.src.saving.saving_api.load_model`, re-exported by `fakekeras.models`, and an
    unrelated package holding the same function."""
    api = types.ModuleType("fakekeras.src.saving.saving_api")
    api.load_model = _load_model  # type: ignore[attr-defined]
    models = types.ModuleType("fakekeras.models")
    models.load_model = api.load_model  # type: ignore[attr-defined]
    other = types.ModuleType("otherpkg.tools")
    other.load_model = api.load_model  # type: ignore[attr-defined]
    modules = {m.__name__: m for m in (api, models, other)}
    sys.modules.update(modules)
    yield modules
    for name in modules:
        del sys.modules[name]


def test_an_alias_in_another_module_of_the_package_gets_the_wrapper(fake_keras: dict[str, types.ModuleType]) -> None:
    api = fake_keras["fakekeras.src.saving.saving_api"]
    replace_function(api, "load_model", lambda original: lambda path: "wrapped " + original(path))
    assert api.load_model("m.keras") == "wrapped loaded m.keras"
    assert fake_keras["fakekeras.models"].load_model("m.keras") == "wrapped loaded m.keras"
    assert api.load_model.__name__ == "_load_model"  # functools.wraps: the original's name
    assert fake_keras["otherpkg.tools"].load_model is _load_model  # another package is not touched


def test_a_method_is_replaced_on_its_class() -> None:
    class Writer:
        def write(self, path: str) -> str:
            return path

    replace_function(Writer, "write", lambda original: lambda self, path: original(self, "/scratch" + path))
    assert Writer().write("/a") == "/scratch/a"
