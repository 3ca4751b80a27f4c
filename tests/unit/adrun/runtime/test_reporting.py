"""What a task reports about its own end (adrun/runtime/reporting.py): the hook's excepthook turns
the exception that ends the script into an error event, with TensorFlow's class decided where
the exception object exists; the traceback is still printed for the user."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf

from adrun.launch.env import task_env
from adrun.launch.env import HOOK_DIR
from adrun.runtime.reporting import error_event
from adrun.task_context import Mode, Role, TaskContext
from adrun.task_events import ErrorEvent, decode

pytestmark = pytest.mark.timeout(120)

TF_ERRORS = "tensorflow.python.framework.errors_impl"


class PeerGone(tf.errors.UnavailableError):
    """A script's own subclass of a TF error: TF's class is still the one of its error code."""


@pytest.mark.parametrize("error,expected", [
    (tf.errors.UnavailableError(None, None, "Socket closed"),
     ErrorEvent(f"{TF_ERRORS}.UnavailableError", "Socket closed", "UnavailableError")),
    (tf.errors.DeadlineExceededError(None, None, "timed out"),
     ErrorEvent(f"{TF_ERRORS}.DeadlineExceededError", "timed out", "DeadlineExceededError")),
    (PeerGone(None, None, "w1 left"), ErrorEvent(f"{__name__}.PeerGone", "w1 left", "UnavailableError")),
    (tf.errors.InvalidArgumentError(None, None, "bad shape"),
     ErrorEvent(f"{TF_ERRORS}.InvalidArgumentError", "bad shape", "InvalidArgumentError")),
    (ValueError("bad batch"), ErrorEvent("ValueError", "bad batch", None)),
])
def test_an_exception_is_reported_with_its_class_and_tfs(error, expected):
    assert error_event(error) == expected


def test_a_long_message_is_cut():
    assert len(error_event(RuntimeError("x" * 100_000)).message) == 2000


def _run_with_hook(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    context = TaskContext(mode=Mode.CAPTURE, role=Role.WORKER, task_index=0, num_workers=1, job_id="t", cluster={},
                          capture_out=str(tmp_path / "found.json"))
    env = task_env(context, os.environ, hook_dir=str(HOOK_DIR))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=100)


def test_the_hooks_excepthook_reports_the_exception_that_ends_the_script(tmp_path):
    done = _run_with_hook(tmp_path, """
        import tensorflow as tf
        raise tf.errors.AbortedError(None, None, "step aborted by a peer")
    """)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    events = [event for line in lines if (event := decode(line)) is not None]
    assert events == [ErrorEvent(f"{TF_ERRORS}.AbortedError", "step aborted by a peer", "AbortedError")]
    # Python's own report is still there, before the event
    traceback = lines.index("Traceback (most recent call last):")
    assert f"{TF_ERRORS}.AbortedError: step aborted by a peer" in lines[traceback:]


def test_without_tensorflow_an_exception_has_no_tf_class_and_a_clean_exit_reports_nothing(tmp_path):
    raised = _run_with_hook(tmp_path, "raise KeyError('missing')")
    assert [decode(line) for line in raised.stderr.splitlines() if decode(line)] == [
        ErrorEvent("KeyError", "'missing'", None)]
    clean = _run_with_hook(tmp_path, "import sys; print('fine', file=sys.stderr); sys.exit(4)")
    assert clean.returncode == 4 and clean.stderr == "fine\n"
