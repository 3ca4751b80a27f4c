"""Walking a TF graph from an op, for tests that check what a step runs."""

from __future__ import annotations

import tensorflow as tf


def ops_run_by(op: tf.Operation) -> list[tf.Operation]:
    """`op` and its transitive data and control inputs."""
    seen: dict[str, tf.Operation] = {}
    pending = [op]
    while pending:
        op = pending.pop()
        if op.name not in seen:
            seen[op.name] = op
            pending.extend(t.op for t in op.inputs)
            pending.extend(op.control_inputs)
    return list(seen.values())
