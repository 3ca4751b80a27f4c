"""The waits of the rows' rounds (adrun/runtime/kernels/exchange_rounds.py), read back from a
worker's rewritten graph as data: which PS task's pulls and pushes wait for which.

Shared by the unit test that rewrites a worker's graph in the test process and the multi-host
oracle that reads the graph a job's workers wrote (tests/scripts/oracle_model.py --graph)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import tensorflow as tf

PULL_ARRIVED = "adrun_pull_arrived"
PUSH_IN_ORDER = "adrun_push_in_order"


def ps_task(op: tf.Operation) -> int | None:
    """The PS task an op runs on: its device, or that of the variable its handle input is."""
    for device in [op.device, *(t.op.device for t in op.inputs[:1])]:
        if device.startswith("/job:ps/"):
            return int(device.split("/task:")[1].split("/")[0])
    return None


def push_waits(graph: tf.Graph) -> dict[int, set[int | None]]:
    """PS task -> the PS tasks whose accumulators must have taken this worker's gradients before
    its own gradients leave the worker."""
    waits: dict[int, set[int | None]] = defaultdict(set)
    for op in graph.get_operations():
        if PUSH_IN_ORDER in op.name:
            for consumer in op.outputs[0].consumers():
                task = ps_task(consumer)
                assert task is not None, f"{consumer.name} waits for rows in order but runs on no PS task"
                waits[task] |= {ps_task(c) for c in op.control_inputs}
    return dict(waits)


def pull_waits(graph: tf.Graph) -> dict[int, set[int | None]]:
    """PS task -> the PS tasks whose pulled values must have reached this worker before its reads
    and gathers run."""
    waits: dict[int, set[int | None]] = defaultdict(set)
    for op in graph.get_operations():
        arrived = [c for c in op.control_inputs if c.name.startswith(PULL_ARRIVED)]
        if arrived:
            task = ps_task(op)
            assert task is not None, f"{op.name} waits for rows' arrival but runs on no PS task"
            waits[task] |= {ps_task(c.inputs[0].op) for c in arrived}
    return dict(waits)


def written_graph(path: Path) -> tf.Graph:
    """The graph of a GraphDef file, ops named and placed as written."""
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(path.read_bytes())
    with tf.Graph().as_default() as graph:
        tf.graph_util.import_graph_def(graph_def, name="")
    return graph
