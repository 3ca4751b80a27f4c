"""Launching side of capture: run the script once in capture mode and read back its GraphItem."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from adrun.errors import UserError
from adrun.graph_item import GraphItem, load_graph_item

HOOK_DIR = str(Path(__file__).resolve().parent / "hook")
CAPTURE_TIMEOUT_S = 600
_TAIL_LINES = 15


def _tail(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-_TAIL_LINES:])


def capture_graph(script: Path, script_args: list[str], num_workers: int, python: str = sys.executable) -> GraphItem:
    """Run `script` up to its Session creation and return what its graph holds.

    Raises UserError when the script fails, never creates a Session (not graph mode), or has
    nothing to train.
    """
    with tempfile.TemporaryDirectory(prefix="adrun-capture-") as tmp:
        out = Path(tmp) / "graph_item.json"
        env = dict(os.environ)
        env.update(
            PYTHONPATH=os.pathsep.join(p for p in (HOOK_DIR, env.get("PYTHONPATH", "")) if p),
            PYTHONUNBUFFERED="1",
            ADRUN_MODE="capture",
            ADRUN_CAPTURE_OUT=str(out),
            ADRUN_ROLE="worker",
            ADRUN_TASK_INDEX="0",
            ADRUN_WORKER_INDEX="0",
            ADRUN_NUM_WORKERS=str(num_workers),
            ADRUN_JOB_ID="capture",
        )
        try:
            proc = subprocess.run(
                [python, str(script), *script_args],
                env=env, capture_output=True, text=True, timeout=CAPTURE_TIMEOUT_S, stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise UserError(
                f"{script}: did not create a tf.compat.v1.Session within {CAPTURE_TIMEOUT_S} s while adrun "
                "captured its graph"
            ) from None
        if out.exists():
            item = load_graph_item(out)
        elif proc.returncode != 0:
            raise UserError(
                f"{script}: failed before creating its Session (exit code {proc.returncode}); "
                f"last lines of its stderr:\n{_tail(proc.stderr)}"
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
