"""Launching side of capture: run the script once in a hook mode and read back what it wrote.

Capture (`capture_graph`) stops the script where a worker would prepare its graph; profiling
(`adrun/profile/run.py`) lets it train a few steps. Both start the script the same way, here, and
word its failures the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from adrun.errors import UserError
from adrun.exit_codes import HOOK_DONE_EXIT_CODE
from adrun.env_vars import Settings
from adrun.graph_item import GraphItem, load_graph_item
from adrun.launch.env import HOOK_DIR, task_env
from adrun.launch.job.local import LocalProcess, worker_argv
from adrun.launch.job.tf_noise import NoiseFilter
from adrun.task_context import Mode, Role, TaskContext
from adrun.task_events import DoneEvent, RefusalEvent, TaskEvent, decode

CAPTURE_TIMEOUT_S = 600
_TAIL_LINES = 15
Found = TypeVar("Found")


def _events(stderr: bytes) -> list[TaskEvent]:
    """What the process reported (adrun/task_events.py), in order."""
    return [event for line in stderr.decode(errors="replace").splitlines() if (event := decode(line)) is not None]


def _tail(text: bytes) -> str:
    """The script's last stderr lines, without TensorFlow's start-up noise, indented to quote."""
    noise = NoiseFilter()
    lines = [line for line in text.decode(errors="replace").splitlines()
             if line.strip() and decode(line) is None and not noise.is_noise(line)]
    return "\n".join("    " + line for line in lines[-_TAIL_LINES:])


def run_in_hook_mode(
    script: Path,
    script_args: list[str],
    num_workers: int,
    job_id: str,
    mode: Mode,
    read: Callable[[Path], Found],
    *,
    failed: str,
    too_slow: str,
    timeout_s: float = CAPTURE_TIMEOUT_S,
    profile_steps: tuple[int, int] = (0, 0),
    python: str = sys.executable,
) -> Found:
    """Run `script` as worker 0 of `num_workers` with ADRUN_MODE=`mode` and return `read` of the
    file the hook wrote (ADRUN_CAPTURE_OUT). `failed` says what a failing script failed at (before
    its exit code and stderr), `too_slow` what it did not do within `timeout_s`.

    `profile_steps` are profile mode's warm-up and timed training steps; the script's scratch
    directory (ADRUN_SCRATCH_DIR) is an empty one deleted afterwards, with the output file. Raises
    UserError when the script fails, is refused by adrun's hook (a TF2 script that never applies an
    optimizer, adrun/runtime/tf2/capture.py), times out, or ends having trained nothing adrun sees. The process is stopped with its whole process group in any case.
    """
    with tempfile.TemporaryDirectory(prefix=f"adrun-{mode}-") as tmp:
        out = Path(tmp) / "found.json"
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        warmup, steps = profile_steps
        context = TaskContext(
            mode=mode, role=Role.WORKER, task_index=0, num_workers=num_workers, job_id=job_id, cluster={},
            capture_out=str(out), scratch_dir=str(scratch), profile_warmup=warmup, profile_steps=steps,
            settings=Settings.from_env(os.environ),
        )
        env = task_env(context, os.environ, hook_dir=str(HOOK_DIR))
        process = LocalProcess(worker_argv(python, script, script_args), cwd=Path.cwd(), env=env)
        try:
            _, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise UserError(f"{script}: {too_slow}") from None
        finally:
            process.kill_group()
        code = process.poll()
        events = _events(stderr)
        if code == HOOK_DONE_EXIT_CODE and any(isinstance(event, DoneEvent) for event in events):
            return read(out)
        refusals = [event for event in events if isinstance(event, RefusalEvent)]
        if refusals:
            raise UserError(f"{script}: {refusals[-1].message}")
        if code != HOOK_DONE_EXIT_CODE:
            raise UserError(
                f"{script}: {failed} (exit code {code}); last lines of its stderr:\n{_tail(stderr)}"
            )
        raise UserError(
            f"{script}: finished without creating a tf.compat.v1.Session or applying an optimizer, so there is "
            "nothing to distribute. adrun runs graph-mode scripts (a tf.compat.v1.Session or "
            "MonitoredTrainingSession) and TF2 scripts (Keras model.fit, optimizer.apply_gradients or apply)."
        )


def require_training_op(script: Path, item: GraphItem) -> GraphItem:
    """`item`, or a UserError when its graph has nothing to train."""
    if not item.trainable_with_grads():
        raise UserError(
            f"{script}: its graph has no training op: no tf.compat.v1.train optimizer's minimize() or "
            "apply_gradients() was called before the Session was created (or, for a Session created before "
            "the model, before the script ended), so there are no gradients to synchronize."
        )
    return item


def capture_graph(
    script: Path, script_args: list[str], num_workers: int, job_id: str, python: str = sys.executable
) -> GraphItem:
    """Run `script` as worker 0 until its graph is captured and return what the graph holds.

    Raises UserError when the script fails, is refused by adrun's hook, neither creates a Session
    (graph mode) nor applies an optimizer (TF2 mode, captured at its first apply), or has nothing
    to train.
    """
    item = run_in_hook_mode(
        script, script_args, num_workers, job_id, Mode.CAPTURE, load_graph_item,
        failed="failed before adrun captured its graph",
        too_slow=f"neither created a tf.compat.v1.Session nor applied an optimizer within {CAPTURE_TIMEOUT_S} s "
                 "while adrun captured its graph",
        python=python,
    )
    return require_training_op(script, item)
