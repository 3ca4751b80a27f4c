"""Turn the user's Session into a session of the distributed job.

A Session of this worker is created on its in-process gRPC server with a config that sees only the
PSs and this worker (`session_target`). Its graph is prepared once, before any of its variables is
first run (`prepare_graph`): checked against the plan's fingerprint, variables placed, lookups of
PS variables made to pull each distinct row once, local proxies added, initialization rewired on
non-chief workers. That is at the Session's creation when the graph already has its optimizer step, else at the Session's first run after it has one (see
pending_sessions.py). Then `join_job` runs the set-up ops and, on non-chief workers, waits for the
chief's initialization.
A worker that runs alone (one worker, no PS) has no one to reach: its sessions stay plain local
sessions, which run a step with less work per `run` than a session of a gRPC server (no master
session, no partitioned graphs, no rendezvous for feeds and fetches).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

import tensorflow as tf
from tensorflow.python.eager import context as eager_context

from adrun.env_vars import INIT_TIMEOUT_VAR
from adrun.runtime.capture import describe_graph
from adrun.task_context import TaskContext
from adrun.runtime.graph_edit import unfinalized
from adrun.runtime.grads import records_for
from adrun.runtime.kernels.devices import COLLECTIVE_GROUP_LEADER, own_device
from adrun.runtime.kernels.distinct_rows import dedup_remote_lookups
from adrun.runtime.kernels.exchange_rounds import order_pulls, round_order
from adrun.runtime.kernels.gradient_sync import PlanMismatchError, poolable_shard
from adrun.runtime.kernels.initialization import keep_shared_initialization
from adrun.runtime.kernels.placement import place_variables, variable_devices
from adrun.runtime.kernels.pooled_bags import pool_lookups
from adrun.runtime.kernels.proxy import add_local_proxy
from adrun.runtime.kernels.replication import replication_of
from adrun.runtime.kernels.start_sync import build_start_op
from adrun.strategies.document import describe_variable_changes

_POLL_S = 0.2


@dataclass
class PreparedGraph:
    ready_checks: list[tf.Tensor] = field(default_factory=list)  # non-chief: the chief's init is done
    setup_ops: list[tf.Operation] = field(default_factory=list)  # run once when a Session joins the job, then cleared
    start_op: tf.Operation | None = None  # run once before the first training step
    local_init_op: tf.Operation | None = None  # non-chief: what a checkpoint restore does here


_server: tf.distribute.Server | None = None
_prepared: weakref.WeakKeyDictionary[tf.Graph, PreparedGraph] = weakref.WeakKeyDictionary()


def _add_virtual_cpus(config: tf.compat.v1.ConfigProto, replica_devices: list[str] | None) -> None:
    """CPU replicas get that many virtual CPU devices."""
    cpus = [int(d.split(":")[1]) for d in replica_devices or [] if d.startswith("CPU:")]
    if cpus:
        config.device_count["CPU"] = max(cpus) + 1


def server_config(replica_devices: list[str] | None = None) -> tf.compat.v1.ConfigProto:
    """The config of a task's gRPC server."""
    config = tf.compat.v1.ConfigProto()
    config.experimental.collective_group_leader = COLLECTIVE_GROUP_LEADER
    _add_virtual_cpus(config, replica_devices)
    return config


def _local_server(ctx: TaskContext) -> tf.distribute.Server:
    global _server
    if _server is None:
        config = server_config(ctx.strategy.replicas_of(ctx.task_index))
        _server = tf.distribute.Server(
            tf.train.ClusterSpec(ctx.cluster), job_name="worker", task_index=ctx.task_index, config=config
        )
    return _server


def check_fingerprint(graph: tf.Graph, ctx: TaskContext) -> None:
    item = describe_graph(graph)
    plan = ctx.strategy
    if item.fingerprint == plan.fingerprint:
        return
    raise PlanMismatchError(
        f"worker {ctx.task_index}: the script built a different graph than the one planned "
        f"(fingerprint {item.fingerprint} != plan {plan.fingerprint}; {describe_variable_changes(plan, item)}). "
        "A script must build the same model on every worker; read ADRUN_WORKER_INDEX only to choose data."
    )


def _prepare_graph(graph: tf.Graph, ctx: TaskContext) -> PreparedGraph:
    check_fingerprint(graph, ctx)
    with unfinalized(graph):
        replication = replication_of(graph)
        if replication is not None:
            replication.rewire_consumers()
        devices = variable_devices(graph, ctx)
        place_variables(graph, devices)
        local = own_device(ctx)
        with graph.as_default():
            for var in tf.compat.v1.global_variables():
                sync = ctx.plan.synchronizer(var.op.name)
                if sync is not None and sync.kind == "ps" and sync.local_proxy and var.op.type == "VarHandleOp":
                    add_local_proxy(graph, var, local)
        pooled = pool_lookups(graph, devices, lambda name: poolable_shard(ctx, name), local) if ctx.plan.uses_ps else set()
        dedup_remote_lookups(graph, devices, local, leave=pooled)
        order_pulls(graph, devices, local, round_order(ctx, graph), leave=pooled)
        prepared = PreparedGraph(
            start_op=build_start_op(graph, devices, local, ctx.task_index, ctx.num_workers, ctx.plan.uses_ps)
        )
        prepared.setup_ops = list(records_for(graph).setup_ops)
        if ctx.is_chief:
            prepared.setup_ops += records_for(graph).chief_setup_ops
        else:
            prepared.ready_checks = keep_shared_initialization(graph, devices, local)
            with graph.as_default():
                replicas = [v for v in tf.compat.v1.global_variables() if devices[v.op.name] == local]
                prepared.local_init_op = tf.compat.v1.variables_initializer(replicas, name="adrun_local_init")
    return prepared


def session_config(ctx: TaskContext, user_config: tf.compat.v1.ConfigProto | None) -> tf.compat.v1.ConfigProto:
    config = tf.compat.v1.ConfigProto()
    # without one from the script, what TF gives such a Session: the tf.config settings (threads, optimizer)
    config.CopyFrom(user_config if user_config is not None else eager_context.context().config)
    replicas = ctx.strategy.replicas_of(ctx.task_index)
    if any(d.startswith("GPU:") for d in replicas[1:]):
        config.allow_soft_placement = True  # replica copies of ops that have no GPU kernel run on the CPU
    if ctx.runs_alone:
        # A plain local session makes its devices itself. No operation timeout: there is no peer to
        # wait for, and TF's local session runs a step with a timeout off the caller's thread.
        _add_virtual_cpus(config, replicas)
        return config
    # Only the PSs and this worker. No other worker, not even the chief (whose initial values
    # reach the others through PS variables or a collective broadcast, which needs no filter):
    # when a Session first runs, TF's master waits for every task the filters name to list its
    # devices, with no timeout (not even operation_timeout_in_ms), so a worker starting after the
    # chief ended (asynchronous PS) would wait forever (docs/decisions/0001-worker-device-filters.md).
    del config.device_filters[:]
    config.device_filters.extend(["/job:ps", f"/job:worker/task:{ctx.task_index}"])
    config.experimental.collective_group_leader = COLLECTIVE_GROUP_LEADER
    # No session.run of a worker of a cluster may block longer than ADRUN_OP_TIMEOUT (a dead or wedged
    # peer becomes an error, not a hang); a timeout the script set itself wins.
    op_timeout_s = ctx.settings.op_timeout_s
    if not config.operation_timeout_in_ms and op_timeout_s > 0:
        config.operation_timeout_in_ms = int(op_timeout_s * 1000)
    return config


def local_init_op(graph: tf.Graph) -> tf.Operation | None:
    prepared = _prepared.get(graph)
    return prepared.local_init_op if prepared else None


KEPT_LOCAL = (
    "a training step ran in a Session that adrun kept local: when the Session was created (or first "
    "ran), its graph had variables but no optimizer step yet, as an evaluation graph has. adrun places "
    "variables on the cluster before their first run: create the Session after minimize()/"
    "apply_gradients(), or before the model, running nothing but input initializers in it until the "
    "optimizer exists."
)


class LocalTrainingError(RuntimeError):
    """A training step ran in a Session that is not a session of the job."""


def take_start_op(graph: tf.Graph) -> tf.Operation | None:
    """The start op of `graph` the first time this is asked, then None.

    Asked before every training step, so it is also where a step of a graph never prepared is
    refused: its Session ran locally, with synchronization ops that would fail or wait forever there.
    """
    prepared = _prepared.get(graph)
    if prepared is None:
        raise LocalTrainingError(KEPT_LOCAL)
    if prepared.start_op is None:
        return None
    op, prepared.start_op = prepared.start_op, None
    return op


def prepare_graph(graph: tf.Graph, ctx: TaskContext) -> None:
    """Prepare `graph` for this worker, once (later Sessions of the same graph reuse it)."""
    if graph not in _prepared:
        _prepared[graph] = _prepare_graph(graph, ctx)


def session_target(
    ctx: TaskContext, user_config: tf.compat.v1.ConfigProto | None
) -> tuple[str, tf.compat.v1.ConfigProto]:
    """Target and config of a Session of the job: this worker's server (started on first use), or
    the in-process target for a worker that runs alone."""
    target = "" if ctx.runs_alone else _local_server(ctx).target
    return target, session_config(ctx, user_config)


def join_job(session: tf.compat.v1.Session, ctx: TaskContext) -> None:
    """Once `session`'s graph is prepared: run its set-up ops; a non-chief waits for the chief's init."""
    prepared = _prepared[session.graph]
    if prepared.setup_ops:
        session.run(prepared.setup_ops)
        prepared.setup_ops = []
    if not prepared.ready_checks:
        return
    init_timeout_s = ctx.settings.init_timeout_s
    deadline = time.monotonic() + init_timeout_s
    while not all(session.run(prepared.ready_checks)):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"worker {ctx.task_index}: the chief did not initialize the variables within "
                f"{init_timeout_s:.0f} s ({INIT_TIMEOUT_VAR})"
            )
        time.sleep(_POLL_S)
