"""Install adrun's TensorFlow patches as soon as the user's script imports tensorflow.

Importing TensorFlow ourselves would cost seconds in every process and change import order, so a
meta-path finder waits for the script's own `import tensorflow` and runs the patches right after
the module has finished executing.
"""

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

_TARGET = "tensorflow"


class _AfterImportLoader(importlib.abc.Loader):
    def __init__(self, wrapped: importlib.abc.Loader) -> None:
        self._wrapped = wrapped

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._wrapped.exec_module(module)
        from adrun.runtime.patches import install

        install()


class _TensorFlowFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # one shot: the real finders resolve tensorflow
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _AfterImportLoader(spec.loader)
        return spec


def install_after_tensorflow_import() -> None:
    """Patch TensorFlow now if it is already imported, else right after it is."""
    if _TARGET in sys.modules:
        from adrun.runtime.patches import install

        install()
    else:
        sys.meta_path.insert(0, _TensorFlowFinder())
