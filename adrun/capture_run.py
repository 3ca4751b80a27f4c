"""Launching side of capture: run the script once in capture mode and read back its GraphItem."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from adrun.errors import UserError
from adrun.graph_item import GraphItem, load_graph_item
from adrun.launch.env import task_env
from adrun.launch.job import HOOK_DIR
from adrun.launch.local import LocalProcess, worker_argv
from adrun.launch.tasks import Task
from adrun.launch.tf_noise import NoiseFilter
from adrun.runtime.patches import ERROR_PREFIX, PLAN_MISMATCH_EXIT_CODE

CAPTURE_TIMEOUT_S = 600
_TAIL_LINES = 15


def _hook_refusal(stderr: bytes) -> str | None:
    """The message of adrun's hook when it refused the script during capture."""
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.startswith(ERROR_PREFIX)]
    return lines[-1][len(ERROR_PREFIX):] if lines else None


def _tail(text: bytes) -> str:
    """The script's last stderr lines, without TensorFlow's start-up noise, indented to quote."""
    noise = NoiseFilter()
    lines = [line for line in text.decode(errors="replace").splitlines() if not noise.is_noise(line) and line.strip()]
    return "\n".join("    " + line for line in lines[-_TAIL_LINES:])


def capture_graph(
    script: Path, script_args: list[str], num_workers: int, job_id: str, python: str = sys.executable
) -> GraphItem:
    """Run `script` as worker 0 until its graph is captured and return what the graph holds.

    Raises UserError when the script fails, is refused by adrun's hook, never creates a Session
    (not graph mode), or has nothing to train. The capture process is stopped with its whole
    process group in any case.
    """
    with tempfile.TemporaryDirectory(prefix="adrun-capture-") as tmp:
        out = Path(tmp) / "graph_item.json"
        env = task_env(
            Task("worker", 0, "localhost", 0), job_id, num_workers, {}, "capture", None, str(HOOK_DIR), os.environ
        )
        env["ADRUN_CAPTURE_OUT"] = str(out)
        process = LocalProcess(worker_argv(python, script, script_args), cwd=Path.cwd(), env=env)
        try:
            _, stderr = process.communicate(timeout=CAPTURE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(
                f"{script}: did not create a tf.compat.v1.Session within {CAPTURE_TIMEOUT_S} s while adrun "
                "captured its graph"
            ) from None
        finally:
            process.kill_group()
        code = process.poll()
        refusal = _hook_refusal(stderr) if code == PLAN_MISMATCH_EXIT_CODE else None
        if code == 0 and out.exists():
            item = load_graph_item(out)
        elif refusal:
            raise UserError(f"{script}: {refusal}")
        elif code != 0:
            raise UserError(
                f"{script}: failed before adrun captured its graph (exit code {code}); "
                f"last lines of its stderr:\n{_tail(stderr)}"
            )
        else:
            raise UserError(
                f"{script}: finished without creating a tf.compat.v1.Session, so there is no graph to "
                "distribute. adrun runs graph-mode scripts: call tf.compat.v1.disable_eager_execution() "
                "and train with a tf.compat.v1.Session or MonitoredTrainingSession."
            )
    if not item.trainable_with_grads():
        raise UserError(
            f"{script}: its graph has no training op: no tf.compat.v1.train optimizer's minimize() or "
            "apply_gradients() was called before the Session was created (or, for a Session created before "
            "the model, before the script ended), so there are no gradients to synchronize."
        )
    return item
