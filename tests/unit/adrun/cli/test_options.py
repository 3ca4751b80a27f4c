"""A reader that leaves early (`adrun logs JOB | head`) ends adrun quietly, as it would a shell tool."""

from __future__ import annotations

import subprocess
import sys

# a command wrapped as every adrun command is, writing more than a pipe buffer holds
WRITER = """
from adrun.cli.options import user_errors

@user_errors
def command():
    for _ in range(100_000):
        print("x" * 80)

command()
"""


def test_a_closed_stdout_ends_the_command_without_a_traceback():
    writer = subprocess.Popen([sys.executable, "-c", WRITER], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout.readline() == b"x" * 80 + b"\n"
    writer.stdout.close()  # the reader leaves
    _, stderr = writer.communicate(timeout=60)

    assert stderr.decode() == ""
    assert writer.returncode == 141
