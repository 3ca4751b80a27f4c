"""Runs another script as if started itself, after appending this process's pid to MARKER: how a
test counts the processes adrun starts of a script (tests/integration/test_first_start.py).

    python count_starts.py MARKER SCRIPT [ARGS...]
"""

import os
import runpy
import sys

marker, script, *args = sys.argv[1:]
with open(marker, "a") as out:
    out.write(f"{os.getpid()}\n")
sys.argv = [script, *args]
runpy.run_path(script, run_name="__main__")
