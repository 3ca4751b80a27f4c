"""adrun's entry point into the user's Python process.

adrun puts this directory first on PYTHONPATH of every process it starts. Python imports
`sitecustomize` at start-up, so this file runs before the user's script. It

1. chains to any other `sitecustomize` further down the path, so a site's own customisation
   keeps working, and
2. when adrun started the process (ADRUN_MODE is set), reports an exception that ends the script
   to the launcher (`runtime/reporting.py`) and arranges for adrun's TensorFlow patches to be
   installed right after the script imports `tensorflow`. Without ADRUN_MODE it does nothing.
"""

import importlib
import os
import sys


def _report_broken_sitecustomize(error: BaseException) -> None:
    # what Python itself prints for a failing sitecustomize
    sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: {error}\n")


def _chain_to_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            _report_broken_sitecustomize(e)
    except Exception as e:  # a broken site customisation must not stop adrun's hook
        _report_broken_sitecustomize(e)
    finally:
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_chain_to_next_sitecustomize()

# The one variable read here, by its literal name: importing `adrun.env_vars` (where the name is
# defined, MODE_VAR) would load adrun into every process that has this directory on its path, even
# when it stays inert. Everything else the runtime is told it reads once, when TensorFlow is
# imported (`adrun.runtime.context`).
if os.environ.get("ADRUN_MODE"):
    from adrun.runtime.import_hook import install_after_tensorflow_import
    from adrun.runtime.reporting import report_uncaught_exceptions

    report_uncaught_exceptions()
    install_after_tensorflow_import()
