"""Creates the file named by its first argument, then sleeps (default 30 s) without importing TF.

Tests use it to prove a command stopped before running the script (the file never appears) or to
hold the script in its capture for a while.
"""

import pathlib
import sys
import time

pathlib.Path(sys.argv[1]).write_text("ran\n")
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 30)
