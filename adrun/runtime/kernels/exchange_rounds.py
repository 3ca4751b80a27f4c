"""The order in which a worker exchanges with the PS tasks: one PS task at a time, staggered.

A step of a PS plan with a sharded embedding moves rows between every worker and every PS task
twice: the pulls (row gathers, PS -> worker, forward) and the pushes (sparse gradients, worker ->
PS, after backward). Left to TF, a
worker asks every PS task at once, so each host's shaped link carries three or more TCP flows out
at the same moments (its PS serving three workers, or its worker pushing to three PS tasks);
measured on 4 namespace hosts at 100 Mbit/s they overflow the link's queue (thousands of drops per
run, retransmissions) and single transfers stall for a few hundred ms while the link idles
(docs/performance.md, "PS transfers in staggered rounds").

So a worker exchanges rows with the other hosts' PS tasks in rounds: worker w starts with the PS
task after its own (`exchange_order`) and goes round the tasks. With one worker and one PS task
per host, in round r worker w talks to PS task (w + 1 + r) mod P only, so every remote PS task
serves one worker per round and every worker hears from one PS task: one flow enters and one leaves
each port. The PS tasks on the worker's own host are in no round: their transfers use no link, so
they go at once, beside the first round (as the last round they added a hand-off and a local
gather, about 12 ms in a traced step, to the rows' arrival, which the step's all-reduce waits for;
measured +2 % a step, inside the benchmark's noise: docs/performance.md). A round
starts when the previous one has arrived:

- pulls (`order_pulls`, at session set-up): the row gathers a worker's step makes on the PS tasks
  of round r wait, by a control dependency, for identities on the worker through which the rows of
  round r-1 reach the forward pass (so the wait is for arrival, not for the PS op to have run;
  TF's graph optimizer keeps an identity after a device crossing);
- pushes (`ps_sync.ps_aggregations`): the sparse gradients bound for round r's PS task leave the
  worker once the sparse accumulators of round r-1 have taken this worker's rows.

Dense reads and pushes (biases, small layers) go at once, as TF sends them. And a plan whose PS
tasks also hold large dense pieces (`rows_only` false: PartitionedPS's head shards, PS's whole
layers) gets no rounds at all: those pieces fill the links with flows at once whatever the rows
do, so ordering the rows beside them only adds a wait per round (a message back from the previous
PS task, a few ms to tens of ms on a busy CPU), and measured that way PartitionedPS's step got
slower, −6 % with the rows in rounds and −12 % with its shards in them too (docs/performance.md,
"PS transfers in staggered rounds").

Only the order changes: every value sent and every sum taken is the one it was.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from itertools import pairwise

import tensorflow as tf

from adrun.graph_item import dtype_itemsize
from adrun.runtime.grads import records_for
from adrun.runtime.kernels.devices import ps_device
from adrun.runtime.kernels.pooled_bags import pooled_variables
from adrun.runtime.kernels.ps_sync import BATCH_BELOW_BYTES
from adrun.runtime.kernels.upstream import parents, upstream_ops
from adrun.strategies.document import PSSync, Strategy
from adrun.task_context import TaskContext

_ROW_PULL = "ResourceGather"
_FEED_TYPES = ("Placeholder", "PlaceholderV2")
# stateful ops that only name or read a variable: reaching one moves no input or random state on
_VARIABLE_ACCESS = frozenset({"VarHandleOp", "ReadVariableOp", "ResourceGather", "VariableV2", "VarIsInitializedOp"})


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0]


def exchange_order(worker: int, cluster: Mapping[str, Sequence[str]]) -> list[int]:
    """The other hosts' PS task indices, in the order worker `worker` exchanges rows with them.

    The rotation starts after the first PS task of the worker's host and is turned by the worker's
    rank among that host's workers (so two workers of one host start on different tasks). The worker's
    own host's PS tasks are left out: its transfers with them use no link, so nothing is gained by
    waiting for them or making others wait. Without a PS task on its host, the worker's index sets
    the start. `cluster`: TF job name -> "host:port" by task index."""
    ps_hosts = [_host(a) for a in cluster.get("ps", ())]
    if not ps_hosts:
        return []
    workers = [_host(a) for a in cluster.get("worker", ())]
    host = workers[worker] if worker < len(workers) else None
    start, rank = (ps_hosts.index(host), sum(1 for w in workers[:worker] if w == host)) if host in ps_hosts else (worker, 0)
    n = len(ps_hosts)
    others = [t for t in ((start + 1 + r) % n for r in range(n)) if ps_hosts[t] != host]
    shift = rank % len(others) if others else 0
    return others[shift:] + others[:shift]


def rows_only(strategy: Strategy, pooled: Collection[str] = ()) -> bool:
    """Whether the plan's PS traffic is rows: a sparse variable has a piece on a PS task whose
    lookups are not pooled (`pooled`: the variables' or shards' names, pooled_bags.py; a pooled
    lookup moves [batch, dim] sums, not rows), and every dense piece on one is small (below
    `ps_sync.BATCH_BELOW_BYTES`, pushed in one batch per task)."""
    rows = False
    for variable in strategy.variables:
        size = dtype_itemsize(variable.dtype)
        names = variable.shard_names()
        for sync, shape, name in zip(variable.synchronizers(), variable.shard_shapes(), names, strict=True):
            if not isinstance(sync, PSSync):
                continue
            if variable.grad == "sparse":
                rows = rows or name not in pooled
            elif math.prod(shape) * size >= BATCH_BELOW_BYTES:
                return False
    return rows


def round_order(ctx: TaskContext, graph: tf.Graph) -> list[int]:
    """The remote PS tasks in the order this worker exchanges rows with them (`exchange_order`), or
    none (every transfer at once) when the plan's PS traffic is not rows only (`rows_only`, the
    lookups of `graph` pooled so far not counted). Asked at apply_gradients (the pushes) and at
    set-up (the pulls): the same decisions, the same answer."""
    return exchange_order(ctx.task_index, ctx.cluster) if rows_only(ctx.strategy, pooled_variables(graph)) else []


def _in_control_flow(op: tf.Operation) -> bool:
    return op._get_control_flow_context() is not None


def _step_ops(graph: tf.Graph) -> set[str]:
    """Names of the ops the recorded training steps' gradients are computed from."""
    grads = [g.values if isinstance(g, tf.IndexedSlices) else g
             for call in records_for(graph).calls for g, _ in call.grads_and_vars if g is not None]
    return {op.name for op in upstream_ops(t.op for t in grads)}


def _on_ps(op: tf.Operation, ps_variables: Collection[str]) -> bool:
    return op.device.startswith("/job:ps") or any(
        g.decode().startswith("loc:@") and g.decode()[len("loc:@"):] in ps_variables for g in op.colocation_groups()
    )


def _ps_variables(devices: Mapping[str, str], order: Sequence[int]) -> dict[str, int]:
    """Variable name -> PS task, for the variables on the PS tasks of `order`."""
    task_of = {ps_device(t): t for t in order}
    return {name: task_of[device] for name, device in devices.items() if device in task_of}


def step_pulls(graph: tf.Graph, devices: Mapping[str, str], order: Sequence[int],
               leave: Collection[str] = ()) -> list[list[tf.Operation]]:
    """Per PS task of `order` (tasks with none left out), the row gathers of its variables that the
    training step makes for this worker's forward pass (consumed off the PS tasks, outside control
    flow), but for those named in `leave` (the gathers a pooled lookup replaced)."""
    ps_variables = _ps_variables(devices, order)
    step = _step_ops(graph)
    by_task: dict[int, list[tf.Operation]] = defaultdict(list)
    for op in graph.get_operations():
        if op.type != _ROW_PULL or op.name not in step or op.name in leave or _in_control_flow(op):
            continue
        handle = op.inputs[0].op
        if handle.type != "VarHandleOp" or handle.name not in ps_variables:
            continue
        if any(not _on_ps(c, ps_variables.keys()) for c in op.outputs[0].consumers()):
            by_task[ps_variables[handle.name]].append(op)
    return [by_task[t] for t in order if by_task[t]]


def _inputs_read(op: tf.Operation) -> frozenset[str]:
    """What running an op takes from outside the graph's variables: the placeholders it needs fed,
    the iterator reads, queue dequeues, readers and other stateful ops its value depends on
    (running one of them moves the input pipeline or a random state on)."""
    return frozenset(
        current.name for current in upstream_ops(parents(op), skip={op.name})
        if current.type in _FEED_TYPES or (current.op_def.is_stateful and current.type not in _VARIABLE_ACCESS))


def _depends_on(op: tf.Operation, ancestor: tf.Operation) -> bool:
    """Whether `op` runs after `ancestor` already (through data or control edges, those added here
    included): a wait the other way round would close a cycle."""
    return any(current is ancestor for current in upstream_ops(parents(op)))


def order_pulls(graph: tf.Graph, devices: Mapping[str, str], local_device: str, order: Sequence[int],
                leave: Collection[str] = ()) -> int:
    """Make the step's row gathers from the PS tasks of `order` go one task after the other, but
    those named in `leave`; returns how many gathers were given a wait. A pooled lookup's gathers
    on the PS (pooled_bags.py) are in no round: their rows are consumed on the PS.

    A gather of round r waits for the arrival of those of round r-1 whose ids come from no
    placeholder, iterator read or other stateful op it does not read already (the shards of one
    lookup share their ids' source): so no fetch comes to need a feed, or to take a batch, it did
    not before. A gather whose own value one of those depends on (a lookup of ids looked up
    before) does not wait for it: that would be a cycle."""
    rounds = step_pulls(graph, devices, order, leave)
    ps_variables = _ps_variables(devices, order).keys()
    markers: dict[str, tf.Operation] = {}

    def arrived(op: tf.Operation) -> tf.Operation:
        """An identity on this worker that the op's worker-side consumers now read through."""
        if op.name not in markers:
            value = op.outputs[0]
            consumers = [c for c in value.consumers() if not _on_ps(c, ps_variables)]
            with graph.as_default(), tf.control_dependencies(None), tf.device(local_device), \
                    tf.name_scope("adrun_pull_arrived"):
                through = tf.identity(value)
            for consumer in consumers:
                for i, t in enumerate(consumer.inputs):
                    if t is value:
                        consumer._update_input(i, through)
            markers[op.name] = through.op
        return markers[op.name]

    reads = {op.name: _inputs_read(op) for ops in rounds for op in ops}
    waited = 0
    for previous, current in pairwise(rounds):
        for op in current:
            waits = [arrived(p) for p in previous
                     if reads[p.name] <= reads[op.name] and not _depends_on(p, op)]
            if waits:
                op._add_control_inputs(waits)
                waited += 1
    return waited
