"""The TensorFlow patches adrun's hook installs in a worker process (after `import tensorflow`).

- `Optimizer.apply_gradients` (tf.compat.v1.train optimizers): records (gradient, variable)
  pairs; in run mode synchronizes the gradients per the plan and returns this worker's step op.
- `Session.__init__` (also reached by MonitoredTrainingSession and the tf_keras backend): on a
  training graph, in capture mode describes the graph and exits, in profile mode stays plain (its
  steps are timed and counted, profiler.py), in run mode returns a session of
  the distributed job; a Session created before its model waits for its first run after the
  optimizer step exists (pending_sessions.py); one on an evaluation graph stays local.
- `BaseSession.run`: settles a pending Session, counts training steps for the launcher's
  throughput view, and with in-graph replicas fetches every replicated tensor merged over the
  replicas.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from adrun.runtime.context import current
from adrun.runtime.refusal import refuse

_installed = False
_local = threading.local()


def _patch_apply_gradients(optimizer_class, ctx) -> None:
    """Record and (in run mode) synchronize every `apply_gradients` of `optimizer_class`.

    Works for tf.compat.v1.train.Optimizer and tf_keras's OptimizerV2 alike: both build each
    variable's update under `<name>/update_<variable>/` and return one step op.
    """
    from tensorflow.python.framework import ops

    from adrun.runtime.grads import GradientRecord, records_for
    from adrun.runtime.kernels.devices import own_device
    from adrun.runtime.kernels.gradient_sync import PlanMismatchError, synchronized_apply
    from adrun.runtime.kernels.replication import ReplicationError, replicate

    original = optimizer_class.apply_gradients

    @functools.wraps(original)
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        if getattr(_local, "depth", 0) or ops.executing_eagerly_outside_functions():
            return original(self, grads_and_vars, *args, **kwargs)
        _local.depth = 1
        try:
            pairs = list(grads_and_vars)
            records = records_for(ops.get_default_graph())
            call = GradientRecord(self, pairs)
            records.calls.append(call)
            apply = functools.partial(_apply_with, original, self, args, kwargs)
            if ctx.mode != "run":
                graph = ops.get_default_graph()
                before = len(graph.get_operations())
                op = apply(pairs)
                call.new_ops = graph.get_operations()[before:]
            else:
                try:
                    op = synchronized_apply(self, apply, _replicated(pairs), ctx, len(records.calls) - 1)
                except PlanMismatchError as e:
                    refuse(str(e))
            call.train_op = op
            records.add_train_op(op)
            if ctx.mode == "profile":
                from adrun.runtime.profiler import add_row_counters

                add_row_counters(ops.get_default_graph(), call)
            return op
        finally:
            _local.depth = 0

    def _replicated(pairs):
        """The pairs with each gradient combined over this worker's in-graph replicas, if any."""
        devices = ctx.strategy.replicas_of(ctx.task_index)
        if len(devices) < 2:
            return pairs
        try:
            pairs = replicate(ops.get_default_graph(), pairs, [own_device(ctx, d) for d in devices])
        except ReplicationError as e:
            refuse(f"worker {ctx.task_index}: cannot split the training step over replicas {devices}: {e}")
        sys.stderr.write(f"adrun: worker {ctx.task_index}: {len(devices)} in-graph replicas on {', '.join(devices)}; "
                         "each takes a slice of every batch\n")
        return pairs

    optimizer_class.apply_gradients = apply_gradients


def _apply_with(original, optimizer, args, kwargs, pairs):
    return original(optimizer, pairs, *args, **kwargs)


def _patch_session(ctx) -> None:
    from tensorflow.python.client import session as tf_session
    from tensorflow.python.framework import ops

    from adrun.runtime.capture import capture_and_exit, capture_at_exit
    from adrun.runtime.kernels.gradient_sync import PlanMismatchError
    from adrun.runtime.kernels.replication import replication_of
    from adrun.runtime.metrics import StepReporter
    from adrun.runtime.pending_sessions import PENDING, SessionKind, session_kind, settle, wait_for_model
    from adrun.runtime.session_setup import (
        LocalTrainingError, join_job, prepare_graph, session_target, take_start_op,
    )

    original_init = tf_session.Session.__init__

    def prepare(graph) -> None:
        try:
            prepare_graph(graph, ctx)
        except PlanMismatchError as e:
            refuse(str(e))

    @functools.wraps(original_init)
    def __init__(self, target="", graph=None, config=None):
        g = graph if graph is not None else ops.get_default_graph()
        kind = session_kind(g)
        if ctx.mode == "capture":
            if kind is SessionKind.TRAINING:
                capture_and_exit(g, ctx.capture_out)
            capture_at_exit(g, ctx.capture_out)  # what the launcher reports if no optimizer step follows
        elif kind is not SessionKind.LOCAL:  # LOCAL (evaluation, inference): a plain local session
            if kind is SessionKind.TRAINING:
                prepare(g)
            target, config = session_target(ctx, config)
        original_init(self, target, graph, config)
        if kind is SessionKind.PENDING:
            wait_for_model(self)
        elif kind is SessionKind.TRAINING:
            join_job(self, ctx)

    settling = threading.Lock()

    def settle_pending(session) -> None:
        """At each run (or callable) of a Session created before its model, until it is decided;
        other threads' runs of it wait here until the graph is prepared."""
        with settling:
            if session not in PENDING or settle(session) is not SessionKind.TRAINING:
                return
            if ctx.mode == "capture":
                capture_and_exit(session.graph, ctx.capture_out)
            prepare(session.graph)
            join_job(session, ctx)

    def start_op(graph):
        try:
            return take_start_op(graph)
        except LocalTrainingError as e:
            refuse(f"worker {ctx.task_index}: {e}" if ctx.mode == "run" else str(e))

    tf_session.Session.__init__ = __init__

    reporter = StepReporter.for_worker(ctx)
    original_run = tf_session.BaseSession.run

    def training_step(session, step: Callable[[], Any]) -> Any:
        """`step()`, a training step of `session` (a `run` or a callable): the start op first (at the
        first step only), and a failing step reported as such before it is raised again."""
        reporter.before_step()
        try:
            start = start_op(session.graph)
            if start is not None:
                original_run(session, start)
            return step()
        except BaseException:
            reporter.step_failed()
            raise

    @functools.wraps(original_run)
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if PENDING and self in PENDING:
            settle_pending(self)
        replication = replication_of(self.graph)
        if replication is not None:
            fetches = replication.merged_fetches(fetches)
        if not StepReporter.is_training_step(self.graph, fetches):
            return original_run(self, fetches, feed_dict, options, run_metadata)
        result = training_step(self, lambda: original_run(self, fetches, feed_dict, options, run_metadata))
        reporter.after_step(self.graph, feed_dict)
        return result

    tf_session.BaseSession.run = run

    original_make_callable = tf_session.BaseSession._make_callable_from_options

    @functools.wraps(original_make_callable)
    def _make_callable_from_options(self, callable_options):
        """Callables (how tf_keras's Model.fit runs its train function) get the same merged
        fetches, first-step start and step counting as `run`."""
        if self in PENDING:
            settle_pending(self)
        replication = replication_of(self.graph)
        if replication is not None:
            merged = replication.merged_fetches(list(callable_options.fetch))
            callable_options = type(callable_options).FromString(callable_options.SerializeToString())
            del callable_options.fetch[:]
            callable_options.fetch.extend(merged)
        callable_fn = original_make_callable(self, callable_options)
        targets = list(callable_options.target) + list(callable_options.fetch)
        if not StepReporter.is_training_step(self.graph, targets):
            return callable_fn
        session = self

        def run_step(*args, **kwargs):
            result = training_step(session, lambda: callable_fn(*args, **kwargs))
            first: Any = args[0] if args else None
            reporter.after_step(session.graph, None, len(first) if hasattr(first, "__len__") else None)
            return result

        return run_step

    tf_session.BaseSession._make_callable_from_options = _make_callable_from_options


def _patch_partitioning(ctx) -> None:
    """Partition planned variables as the script creates them (see kernels/partitioning.py)."""
    import tensorflow as tf
    from tensorflow.python.client import session as tf_session
    from tensorflow.python.ops import embedding_ops, variable_scope, variables

    from adrun.runtime.kernels.partitioning import partitioner_for, whole_initial_value, whole_value

    ours: dict[int, tf.Tensor] = {}  # the PartitionedVariables adrun made, by id: their whole value
    original_get = variable_scope._VariableStore.get_variable
    signature = inspect.signature(original_get)

    @functools.wraps(original_get)
    def get_variable(self, name, *args, **kwargs):
        partition = ctx.plan.partition(name)
        call = signature.bind(self, name, *args, **kwargs)
        if partition is None or call.arguments.get("partitioner") is not None:
            return original_get(self, name, *args, **kwargs)
        options = {k: v for k, v in call.arguments.items() if k not in ("self", "name")}
        options["partitioner"] = partitioner_for(partition)
        existing = self._partitioned_vars.get(name)
        if existing is None:
            options["initializer"] = whole_initial_value(
                self, name, options.get("shape"), options.get("dtype", tf.float32), options.get("initializer"))
        elif options.get("shape") is None:
            # Reuse without a shape: TF's partitioner needs one, though it only returns the existing variable.
            options["shape"] = existing.get_shape()
        var = original_get(self, name, **options)
        if id(var) not in ours:
            ours[id(var)] = whole_value(var)
        return var

    original_lookup = embedding_ops.embedding_lookup

    @functools.wraps(original_lookup)
    def embedding_lookup(params, ids, partition_strategy="mod", *args, **kwargs):
        # The script was written for one table; adrun's shards are contiguous slices of it.
        if id(params) in ours:
            partition_strategy = "div"
        return original_lookup(params, ids, partition_strategy, *args, **kwargs)

    def fetch(var):
        # `sess.run(emb)` reads the plain variable; adrun's partitioned one is fetched whole. One the
        # script partitioned itself is left to TF, which refuses it.
        return [ours.get(id(var), var)], lambda values: values[0]

    variable_scope._VariableStore.get_variable = get_variable
    embedding_ops.embedding_lookup = embedding_lookup
    tf.compat.v1.nn.embedding_lookup = embedding_lookup
    tf_session.register_session_run_conversion_functions(variables.PartitionedVariable, fetch)


def _patch_dataset_iterators(ctx, shard: bool, replicas: int) -> None:
    """Adapt each tf.data iterator the script makes: with --shard-data it reads only this worker's
    shard; with in-graph replicas its batch size is left unknown to the graph (see
    `relax_batch_dimension`)."""
    from tensorflow.python.data.ops import dataset_ops

    from adrun.runtime.kernels.input_sharding import shard_for_worker
    from adrun.runtime.kernels.replication import relax_batch_dimension

    def adapt(dataset):
        if shard:
            dataset = shard_for_worker(dataset, ctx.num_workers, ctx.task_index)
        return relax_batch_dimension(dataset) if replicas > 1 else dataset

    for method in ("_make_one_shot_iterator", "_make_initializable_iterator"):
        original = getattr(dataset_ops.DatasetV1, method)

        def adapted_iterator(self, *args, _original=original, **kwargs):
            return _original(adapt(self), *args, **kwargs)

        setattr(dataset_ops.DatasetV1, method, functools.wraps(original)(adapted_iterator))


def _patch_saver_on_non_chief() -> None:
    """Only the chief writes or reads checkpoints.

    Other workers would write the same files concurrently, and a late restore on a non-chief could
    overwrite shared variables mid-training. A non-chief's restore just initializes its own
    replicas: they receive the chief's (restored) values at the first step anyway.
    """
    from tensorflow.python.training import saver as tf_saver

    from adrun.runtime.no_trace import save_nothing
    from adrun.runtime.session_setup import local_init_op

    def restore(self, sess, save_path):
        op = local_init_op(sess.graph)
        if op is not None:
            sess.run(op)

    tf_saver.Saver.save = save_nothing
    tf_saver.Saver.restore = restore


def _patch_profile(ctx) -> None:
    """Profile mode (profiler.py): the script's Sessions stay plain local sessions; its training
    steps, by `run` or Keras callable, are timed or counted, and its checkpoint and summary writes
    go to a scratch directory (no_trace.py). Where capture mode would end the script, the process
    may wait to be told whether to go on (capture_point.py); a training step capture would refuse
    (in a Session a run keeps local) is refused here too, with the same words."""
    from tensorflow.python.client import session as tf_session

    from tensorflow.python.framework import ops

    from adrun.runtime.capture_point import CapturePoint
    from adrun.runtime.metrics import StepReporter, examples_in_feed
    from adrun.runtime.no_trace import keep_writes_in
    from adrun.runtime.pending_sessions import SessionKind, session_kind
    from adrun.runtime.profiler import Profiler
    from adrun.runtime.session_setup import KEPT_LOCAL

    keep_writes_in(ctx.scratch_dir)
    profiler = Profiler(ctx.profile_warmup, ctx.profile_steps, ctx.capture_out,
                        CapturePoint(ctx.capture_out, ctx.capture_answer_fd))
    kept_local: weakref.WeakSet[Any] = weakref.WeakSet()  # Sessions a run would keep local: no training there

    original_init = tf_session.Session.__init__

    @functools.wraps(original_init)
    def __init__(self, target="", graph=None, config=None):
        g = graph if graph is not None else ops.get_default_graph()
        kind = session_kind(g)
        profiler.at_capture_point(g)
        original_init(self, target, graph, config)
        if kind is SessionKind.LOCAL:
            kept_local.add(self)
        profiler.saw_session(self.graph)  # described at exit if the script never trains

    def before_step(session) -> None:
        """What capture mode does at a training step: refuse one in a Session a run would keep local
        (so the profile refuses what the run would), and describe a pending Session's graph."""
        if session in kept_local:
            refuse(KEPT_LOCAL)
        profiler.at_capture_point(session.graph)

    original_run = tf_session.BaseSession.run

    @functools.wraps(original_run)
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if not StepReporter.is_training_step(self.graph, fetches):
            return original_run(self, fetches, feed_dict, options, run_metadata)
        before_step(self)
        return profiler.training_step(
            self.graph, fetches, examples_in_feed(feed_dict),
            lambda: original_run(self, fetches, feed_dict, options, run_metadata),
            lambda extra: original_run(self, (fetches, extra), feed_dict, options, run_metadata),
        )

    original_make_callable = tf_session.BaseSession._make_callable_from_options

    @functools.wraps(original_make_callable)
    def _make_callable_from_options(self, callable_options):
        callable_fn = original_make_callable(self, callable_options)
        targets = list(callable_options.target) + list(callable_options.fetch)
        if not StepReporter.is_training_step(self.graph, targets):
            return callable_fn
        session = self
        counting_fn: list[Any] = []  # made at the first counted step: the callable with the counters fetched too

        def run_counted(extra, args, kwargs):
            if not counting_fn:
                options = type(callable_options).FromString(callable_options.SerializeToString())
                options.fetch.extend(t.name for t in extra)
                counting_fn.append(original_make_callable(session, options))
            result = counting_fn[0](*args, **kwargs)
            return result[: -len(extra)], result[-len(extra):]

        def training_step(*args, **kwargs):
            first: Any = args[0] if args else None
            before_step(session)
            return profiler.training_step(
                session.graph, targets, len(first) if hasattr(first, "__len__") else None,
                lambda: callable_fn(*args, **kwargs),
                lambda extra: run_counted(extra, args, kwargs),
            )

        return training_step

    tf_session.Session.__init__ = __init__
    tf_session.BaseSession.run = run
    tf_session.BaseSession._make_callable_from_options = _make_callable_from_options


def install() -> None:
    """Install the patches once; inert outside adrun worker processes."""
    global _installed
    ctx = current()
    if _installed or ctx.role != "worker":
        return
    _installed = True
    from tensorflow.python.training import optimizer as v1_optimizer

    _patch_apply_gradients(v1_optimizer.Optimizer, ctx)
    if ctx.mode == "profile":
        _patch_profile(ctx)
        return
    _patch_session(ctx)
    if ctx.mode == "run":
        _patch_partitioning(ctx)
        replicas = len(ctx.strategy.replicas_of(ctx.task_index))
        if ctx.settings.shard_data or replicas > 1:
            _patch_dataset_iterators(ctx, ctx.settings.shard_data, replicas)
        if not ctx.is_chief:
            _patch_saver_on_non_chief()


def install_tf_keras() -> None:
    """Patch tf_keras's legacy optimizers (what `Model.fit` uses in graph mode) once imported."""
    ctx = current()
    if ctx.role != "worker":
        return
    from tf_keras.src.optimizers.legacy import optimizer_v2

    _patch_apply_gradients(optimizer_v2.OptimizerV2, ctx)


def install_tf_keras_saving() -> None:
    """In profile mode, tf_keras models save nothing (no_trace.py); other modes leave them alone."""
    ctx = current()
    if ctx.role != "worker" or ctx.mode != "profile":
        return
    from adrun.runtime.no_trace import keep_keras_saves_out

    keep_keras_saves_out()
