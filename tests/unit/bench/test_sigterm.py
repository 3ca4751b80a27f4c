"""A SIGTERM inside sigterm_exits() ends the process through its `finally`, with the shell's exit
code for SIGTERM, and the handler in place before is back after the block."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bench.sigterm import sigterm_exits

ROOT = Path(__file__).resolve().parents[3]


def test_a_sigterm_runs_the_finally_and_exits_143(tmp_path):
    ready, cleaned = tmp_path / "ready", tmp_path / "cleaned"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from bench.sigterm import sigterm_exits
        with sigterm_exits():
            try:
                Path({str(ready)!r}).write_text("up")
                time.sleep(120)
            finally:
                Path({str(cleaned)!r}).write_text("done")
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        while not ready.exists():
            assert child.poll() is None, "the script ended before it was ready"
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 128 + signal.SIGTERM
        assert cleaned.read_text() == "done"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_previous_handler_is_restored():
    def mine(signum: int, frame: object) -> None:
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with sigterm_exits():
            assert signal.getsignal(signal.SIGTERM) is not mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
