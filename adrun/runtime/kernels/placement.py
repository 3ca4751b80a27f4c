"""Where each variable lives: on its PS (PS synchronizers) or on this worker (all-reduce replicas).

Only the variable ops get a device; the ops that read or update a variable follow it through TF's
colocation of resource ops, and every other op stays on this worker (the session's device filters
keep other workers out of sight).
"""

from __future__ import annotations

import tensorflow as tf

from adrun.task_context import TaskContext
from adrun.runtime.grads import variable_name
from adrun.runtime.kernels.devices import own_device, ps_device


def _colocated_with(op: tf.Operation) -> list[str]:
    return [g.decode()[len("loc:@"):] for g in op.colocation_groups() if g.decode().startswith("loc:@")]


def variable_devices(graph: tf.Graph, ctx: TaskContext) -> dict[str, str]:
    """Device of every global variable of the graph, by variable name."""
    # State the plan does not name (global_step, optimizer scalars, the script's own counters) is
    # shared on PS 0 when the plan uses PSs, so there is one copy the chief updates; else each worker
    # keeps its own replica, updated identically. State TF marks as per-replica (synchronization
    # ON_READ, e.g. Keras batch-norm moving statistics) is always kept on each worker: every worker
    # updates it from its own batches, as under TF's own distribution strategies.
    local = own_device(ctx)
    default = ps_device(0) if ctx.plan.uses_ps else local

    def planned_device(name: str) -> str | None:
        sync = ctx.plan.synchronizer(name)
        if sync is None:
            return None
        return ps_device(sync.ps_task) if sync.kind == "ps" else local

    with graph.as_default():
        global_vars = tf.compat.v1.global_variables()
    devices: dict[str, str] = {}
    for var in global_vars:
        name = variable_name(var)
        device = planned_device(name)
        if device is None and getattr(var, "synchronization", None) == tf.VariableSynchronization.ON_READ:
            device = local
        if device is None:
            # optimizer slots are created colocated with their variable: keep them together
            device = next((d for d in map(planned_device, _colocated_with(var.op)) if d), default)
        devices[name] = device
    return devices


def place_variables(graph: tf.Graph, devices: dict[str, str]) -> None:
    for name, device in devices.items():
        graph.get_operation_by_name(name)._set_device(device)
