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

CAPTURE_TIMEOUT_S = 600
_TAIL_LINES = 15


def _tail(text: bytes) -> str:
    lines = [line for line in text.decode(errors="replace").splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-_TAIL_LINES:])


def capture_graph(
    script: Path, script_args: list[str], num_workers: int, job_id: str, python: str = sys.executable
) -> GraphItem:
    """Run `script` as worker 0 up to its Session creation and return what its graph holds.

    Raises UserError when the script fails, never creates a Session (not graph mode), or has
    nothing to train. The capture process is stopped with its whole process group in any case.
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
        if out.exists():
            item = load_graph_item(out)
        elif process.poll() != 0:
            raise UserError(
                f"{script}: failed before creating its Session (exit code {process.poll()}); "
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
            "apply_gradients() was called before the Session was created, so there are no gradients to "
            "synchronize."
        )
    return item
