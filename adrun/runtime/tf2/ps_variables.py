"""Variables of a TF2 parameter-server plan: one shared copy on a PS task, used by every worker.

A variable creator, entered at `import tensorflow` like the all-reduce broadcast, replaces each
variable the script creates by a handle to a resource on `/job:ps/task:k`:
- a variable the plan names goes to its synchronizer's PS task; one the plan splits (PartitionedPS)
  becomes a `ShardedVariable` of one shard per PS task of its plan (ps_shards.py);
- an optimizer slot goes to its variable's PS task, or is split as its variable is: Keras 3's slots
  are made with their variable known (ps_shards.py); tf_keras and the legacy optimizers create slots
  under `colocate_vars_with(variable)`, which is a device scope in eager mode, so the creator sees
  the reference variable's PS device;
- other state (the optimizer's step count and learning rate, Keras's seed state) goes to PS 0, so
  there is one copy, as in graph mode (kernels/placement.py); per-replica state (synchronization
  ON_READ: metrics, batch-norm statistics) and adrun's own variables stay on the worker.

`tf.Variable` on a remote device is private to its client (it gets a unique shared name, and TF
refuses explicit shared names in eager mode), so the handle is a raw `VarHandleOp` with a shared name
made from the variable's name, wrapped in a `BaseResourceVariable` (private API, pinned in
runtime/versions.py). The wrapper installs no deleter: a worker's exit leaves the resource to the others.
The chief assigns each initial value; the other workers never evaluate theirs (a worker seeded
differently still trains the chief's values) and wait until the chief's value is there.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.ops import gen_resource_variable_ops, handle_data_util, resource_variable_ops

from adrun.env_vars import INIT_TIMEOUT_VAR
from adrun.runtime.kernels.devices import ps_device
from adrun.runtime.tf2.broadcast import is_internal
from adrun.runtime.tf2.ps_shards import ShardedVariable, SplitVariable, slot_reference
from adrun.strategies.document import PSSync, Strategy, shard_sizes

_POLL_S = 0.05


def ps_tasks_by_name(strategy: Strategy) -> dict[str, list[int]]:
    """The PS task of every variable of a PS-only plan, one per shard of a split variable (planning
    refuses mixed plans in TF2 mode: strategies/document.py, tf2_refusals)."""
    found = {}
    for var in strategy.variables:
        syncs = [sync for sync in var.synchronizers() if isinstance(sync, PSSync)]
        if len(syncs) < len(var.synchronizers()):
            raise RuntimeError(f"'{var.name}': a TF2 parameter-server plan holds each variable on PS tasks; "
                               f"it says {var.sync or var.partition!r}")
        found[var.name] = [sync.ps_task for sync in syncs]
    return found


def ps_task_of(name: str, device_scope: str, ps_tasks: dict[str, list[int]]) -> list[int]:
    """Where a new variable goes, one PS task per shard: its plan's; else the PS task of the device
    scope it is created in (a tf_keras slot, under `colocate_vars_with` its variable, e.g.
    `/job:ps/replica:0/task:1/device:CPU:0`); else PS 0."""
    if name in ps_tasks:
        return ps_tasks[name]
    spec = tf.DeviceSpec.from_string(device_scope or "")
    return [spec.task if spec.job == "ps" and spec.task is not None else 0]


class SharedVariables:
    """The variable creator of a TF2 worker in a parameter-server plan."""

    def __init__(self, ps_tasks: dict[str, list[int]], chief: bool, worker: int, init_timeout_s: float) -> None:
        self._ps_tasks = ps_tasks
        self._chief = chief
        self._worker = worker
        self._init_timeout_s = init_timeout_s
        self._seen: Counter[str] = Counter()  # name -> variables of that name so far
        self._split: dict[int, list[int]] = {}  # id of a ShardedVariable made here -> its PS tasks
        self._made: list[Any] = []  # those ShardedVariables, so their ids stay theirs

    def __call__(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        if is_internal() or kwargs.get("synchronization") == tf.VariableSynchronization.ON_READ:
            return next_creator(**kwargs)
        scoped = context.context().scope_name + (kwargs.get("name") or "Variable")
        name = scoped.rstrip("/").split(":")[0]
        reference = slot_reference()
        tasks = self._split.get(id(reference)) or ps_task_of(name, self._device_of(reference), self._ps_tasks)
        self._seen[name] += 1
        shared = name if self._seen[name] == 1 else f"{name}#{self._seen[name]}"
        with tf.init_scope():
            variable = self._create(shared, name, tasks, kwargs)
        if isinstance(variable, ShardedVariable):
            self._split[id(variable)] = tasks
            self._made.append(variable)
        return variable

    @staticmethod
    def _device_of(reference: Any) -> str:
        return reference.device if reference is not None else context.context().device_name

    def _create(self, shared: str, name: str, tasks: list[int], kwargs: dict[str, Any]) -> Any:
        """The variable on its PS task, or split in rows over `tasks` (the chief's initial value
        cut as TF's "div" sharding cuts it: strategies/document.py shard_sizes)."""
        initial = kwargs.get("initial_value")
        dtype = kwargs.get("dtype")
        value = None
        if self._chief:
            value = initial() if callable(initial) else initial
            value = tf.convert_to_tensor(value, dtype=dtype if not isinstance(value, tf.Tensor) else None)
            dtype, shape = value.dtype, value.shape
        else:
            dtype, shape = self._declared(initial, dtype, kwargs.get("shape"), name)
        if len(tasks) == 1:
            return self._shard(shared, name, ps_device(tasks[0]), dtype, shape, value, kwargs)
        shards, start = [], 0
        for i, (task, rows) in enumerate(zip(tasks, shard_sizes(shape[0], len(tasks)), strict=True)):
            part = None if value is None else value[start:start + rows]
            shards.append(self._shard(f"{shared}/part_{i}", f"{name}/part_{i}", ps_device(task), dtype,
                                      tf.TensorShape([rows, *shape[1:]]), part, kwargs))
            start += rows
        return SplitVariable(shards, name=name)

    def _shard(self, shared: str, name: str, device: str, dtype: tf.DType, shape: tf.TensorShape,
               value: tf.Tensor | None, kwargs: dict[str, Any]) -> Any:
        with tf.device(device):
            handle = gen_resource_variable_ops.var_handle_op(
                shape=shape, dtype=dtype, shared_name=f"adrun/variable/{shared}", container="", name="adrun_shared")
            resource_variable_ops._set_handle_shapes_and_types(
                handle, handle_data_util.create_handle_data(shape, dtype), False)
            if value is not None:
                gen_resource_variable_ops.assign_variable_op(handle, value)
            else:
                self._wait_for_chief(handle, shared)
        return resource_variable_ops.BaseResourceVariable(
            trainable=kwargs.get("trainable", True), shape=shape, dtype=dtype, handle=handle,
            constraint=kwargs.get("constraint"), synchronization=kwargs.get("synchronization"),
            aggregation=kwargs.get("aggregation"), handle_name=f"{name}:0", unique_id=f"adrun/{shared}",
            in_graph_mode=False, distribute_strategy=None)

    def _declared(self, initial: Any, dtype: Any, shape: Any, name: str) -> tuple[tf.DType, tf.TensorShape]:
        """A non-chief's dtype and shape for `name` without evaluating its initializer when the
        creator was told them; a value given as such is only converted."""
        if shape is not None and dtype is not None:
            return tf.as_dtype(dtype), tf.TensorShape(shape)
        value = initial() if callable(initial) else initial
        value = tf.convert_to_tensor(value, dtype=dtype if not isinstance(value, tf.Tensor) else None)
        return value.dtype, value.shape

    def _wait_for_chief(self, handle: tf.Tensor, shared: str) -> None:
        deadline = time.monotonic() + self._init_timeout_s
        while not bool(gen_resource_variable_ops.var_is_initialized_op(handle)):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"worker {self._worker}: the chief did not initialize '{shared}' on its parameter server "
                    f"within {self._init_timeout_s:.0f} s ({INIT_TIMEOUT_VAR}); every worker must create the "
                    "same variables")
            time.sleep(_POLL_S)
