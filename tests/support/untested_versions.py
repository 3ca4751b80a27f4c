"""An adrun job whose processes see an untested TensorFlow: what the version checks of both modes
(adrun/runtime/versions.py) refuse."""

from __future__ import annotations

from pathlib import Path

UNTESTED_TF = "2.99.0"


def untested_tensorflow_env(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with a sitecustomize that makes the package metadata report TensorFlow
    UNTESTED_TF (adrun's own sitecustomize chains to it) in every process of the job."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import importlib.metadata as metadata\n"
        "_version = metadata.version\n"
        f"metadata.version = lambda name: {UNTESTED_TF!r} if name == 'tensorflow' else _version(name)\n")
    return {"PYTHONPATH": str(shim)}
