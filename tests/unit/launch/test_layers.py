"""launch/ launches and supervises and returns data; it shows nothing (adrun.ui is the CLI's to
compose) and never loads TensorFlow or the runtime. Checked on a fresh interpreter that imports
every module of adrun.launch."""

from __future__ import annotations

import json
import subprocess
import sys

IMPORT_ALL = """
import importlib, json, pkgutil, sys
import adrun.launch
names = [m.name for m in pkgutil.walk_packages(adrun.launch.__path__, "adrun.launch.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "loaded": sorted(sys.modules)}))
"""


def test_no_launch_module_imports_the_terminal_ui_the_cli_or_tensorflow():
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {"adrun.launch.job.restarts", "adrun.launch.job.supervisor", "adrun.launch.check.report"} \
        <= set(found["imported"])
    loaded = set(found["loaded"])
    forbidden = {"adrun.ui", "adrun.cli", "adrun.shown_job", "adrun.runtime", "tensorflow"}
    assert not forbidden & loaded, sorted(forbidden & loaded)
