"""The TensorFlow, Keras and tf_keras versions adrun's two runtimes were tested with, and the
private APIs each touches: one registry and one check for graph mode and TF2 mode.

Both rest on private code, which may change in any release: graph mode edits built graphs through
`Operation` internals (control inputs, inputs, attributes, devices) and patches Session, the
variable store, dataset iterators and Saver; TF2 mode patches `keras.src` optimizers, callbacks and
data adapters and `tensorflow.python` collective ops and checkpoint classes. So a task on an
untested version stops with one message naming what it found, what was tested and the setting to
try anyway, instead of failing deep inside a trace; a missing private attribute is named whatever
the setting, since nothing can work without it.

`ModeApi.check_versions()` reads versions from package metadata (no import) and checks the
TensorFlow attributes (their modules are loaded by `import tensorflow`). The Keras and tf_keras
attributes are checked by `check_module` right after their module is imported (import_hook.py,
tf2/around.py): importing Keras from here could run while the script's own `import keras` is half
done. Versions are checked once the script's mode is known: a run-mode task after `import
tensorflow`, capture and profile at the script's first optimizer step (TF2: tf2/capture.py,
tf2/profiler.py; graph: capture.py, profiler.py). Capture and profile install graph mode's patches
for every script, a TF2 script's too, so at `import tensorflow` they check only the attributes those
patches replace then (`GRAPH_AT_IMPORT`, import_hook.py): an attribute only graph run mode uses
refuses a graph script, never a TF2 one. tf_keras's version counts for either mode only once the
script has imported it (`when_imported`): a run-mode task checks it again at that import
(import_hook.py), and a Keras 3 script is not refused for a tf_keras merely installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import CodeType

from adrun.env_vars import ALLOW_UNTESTED_VERSIONS_VAR
from adrun.errors import UserError
from adrun.task_context import Mode

# distribution -> the release series (major.minor) adrun was tested with
TESTED: dict[str, str] = {"tensorflow": "2.21", "keras": "3.15", "tf_keras": "2.21"}

# module -> the attributes TF2 mode reads or replaces in it ("Class.method" for a method)
_TF2_PRIVATE: dict[str, tuple[str, ...]] = {
    "tensorflow.python.eager.context": (
        "Context.configure_collective_ops", "Context.configure_coordination_service",
        "Context.enable_collective_ops", "Context.abort_collective_ops", "Context.set_server_def",
        "Context.ensure_initialized",  # a TF2 plan's PS task starts its server through it (ps_task.py)
    ),
    "tensorflow.python.ops.collective_ops": (
        "all_reduce_v2", "all_gather_v2", "broadcast_send_v2", "broadcast_recv_v2",
    ),
    "tensorflow.python.ops.gen_summary_ops": ("create_summary_file_writer",),
    # parameter-server plans (ps_cluster.py, ps_variables.py, ps_exchange.py, ps_gather.py)
    "tensorflow.python.ops.resource_variable_ops": (
        "BaseResourceVariable", "BaseResourceVariable.sparse_read", "_set_handle_shapes_and_types",
    ),
    "tensorflow.python.ops.handle_data_util": ("create_handle_data",),
    "tensorflow.python.ops.gen_resource_variable_ops": (
        "var_handle_op", "assign_variable_op", "var_is_initialized_op",
    ),
    "tensorflow.python.ops.gen_data_flow_ops": (
        "fifo_queue_v2", "queue_enqueue_v2", "queue_enqueue_many_v2", "queue_dequeue_v2",
        "resource_conditional_accumulator", "resource_accumulator_apply_gradient",
        "resource_accumulator_take_gradient",
    ),
    # split variables (ps_shards.py)
    "tensorflow.python.distribute.sharded_variable": ("ShardedVariable",),
    "tensorflow.python.eager.backprop": ("GradientTape.gradient",),
    "tensorflow.python.checkpoint.checkpoint": ("Checkpoint._write", "Checkpoint._maybe_create_save_counter"),
    "tensorflow.python.checkpoint.checkpoint_management": (
        "CheckpointManager._directory", "CheckpointManager._checkpoint_prefix",
        "CheckpointManager._maybe_delete",
    ),
    # ps_shard_updates.py: a shard takes its variable's index, a slot wraps its shard
    "keras.src.optimizers.base_optimizer": ("BaseOptimizer.apply", "BaseOptimizer.add_variable_from_reference",
                                            "BaseOptimizer._get_variable_index",
                                            "BaseOptimizer._trainable_variables_indices"),
    "keras.src.backend.tensorflow.optimizer": ("TFOptimizer.add_variable_from_reference",
                                               "TFOptimizer._distributed_tf_update_step", "TFOptimizer._var_key"),
    # ps_atomic.py; ps_gather.py and row_reads.py add Variable.sparse_read, which tf.gather uses
    # (test_ps_gather.py, test_row_reads.py)
    "keras.src.backend.tensorflow.core": (
        "Variable.assign_add", "Variable.assign_sub", "Variable._convert_to_tensor", "Variable.value",
        "Variable._value", "Variable._shape",
    ),
    "keras.src.backend.common.stateless_scope": ("in_stateless_scope",),
    "keras.src.saving.saving_api": ("save_model", "save_weights", "load_model", "load_weights"),
    "keras.src.callbacks.backup_and_restore": (
        "BackupAndRestore._load_model", "BackupAndRestore._save_model",
    ),
    "keras.src.callbacks.model_checkpoint": ("ModelCheckpoint._save_model",),
    "keras.src.callbacks.tensorboard": ("TensorBoard.__init__",),
    "keras.src.backend.tensorflow.trainer": ("TensorFlowTrainer.fit",),
    "keras.src.trainers.data_adapters": ("get_data_adapter", "is_tf_dataset"),
    "tf_keras.src.optimizers.optimizer": ("Optimizer.apply_gradients",),
    "tf_keras.src.optimizers.legacy.optimizer_v2": ("OptimizerV2.apply_gradients", "OptimizerV2._create_all_weights"),
    "tf_keras.src.saving.saving_api": ("save_model", "save_weights", "load_model", "load_weights"),
    "tf_keras.src.distribute.distributed_file_utils": ("write_dirpath", "remove_temp_dirpath"),
}

# module -> the attributes graph mode reads or replaces in it
_GRAPH_PRIVATE: dict[str, tuple[str, ...]] = {
    # graph edits of the kernels (gradient_sync, proxy, ps_prefetch, exchange_rounds, distinct_rows,
    # replication, placement, initialization, partitioning), pending_sessions.py, graph_edit.py
    "tensorflow.python.framework.ops": (
        "executing_eagerly_outside_functions", "init_scope",
        "Operation._update_input", "Operation._add_control_input", "Operation._add_control_inputs",
        "Operation._remove_all_control_inputs", "Operation._control_outputs", "Operation._clear_attr",
        "Operation._set_attr", "Operation._set_device", "Operation._get_control_flow_context",
        "Operation._is_stateful", "Graph._unsafe_unfinalize", "Graph._container",
    ),
    # patches.py: Session, its runs and callables (tf_keras's fit), Saver on non-chief workers
    "tensorflow.python.client.session": (
        "Session.__init__", "BaseSession.run", "BaseSession._make_callable_from_options",
        "register_session_run_conversion_functions",
    ),
    "tensorflow.python.training.optimizer": ("Optimizer.apply_gradients", "Optimizer._non_slot_variables"),
    "tensorflow.python.training.saver": ("Saver.save", "Saver.restore"),
    # partitioned variables (patches.py, kernels/partitioning.py)
    "tensorflow.python.ops.variable_scope": (
        "_VARSTORE_KEY", "_VariableStore.get_variable", "_VariableStore._get_default_initializer",
        "_VariableStore._vars", "_VariableStore._partitioned_vars",
    ),
    "tensorflow.python.ops.embedding_ops": ("embedding_lookup",),
    # kernels/pooled_lookups.py reads the op chains these gradient functions build
    "tensorflow.python.ops.math_grad": (
        "_MeanGrad", "_SumGrad", "_SparseSegmentMeanGrad", "_SparseSegmentSumGrad", "_SparseSegmentSqrtNGrad",
    ),
    "tensorflow.python.ops.resource_variable_ops": ("_GatherGrad",),
    "tensorflow.python.ops.data_flow_grad": ("_DynamicStitchGrads",),
    "tensorflow.python.ops.variables": ("PartitionedVariable",),
    # --shard-data and in-graph replicas (patches.py, kernels/input_sharding.py, replication.py)
    "tensorflow.python.data.ops.dataset_ops": (
        "DatasetV1._make_one_shot_iterator", "DatasetV1._make_initializable_iterator", "DatasetV1Adapter",
    ),
    "tensorflow.python.data.experimental.ops.distribute": ("_AutoShardDataset",),
    # profile mode's scratch writes (no_trace.py)
    "tensorflow.python.training.training_util": ("global_step", "write_graph"),
    "tensorflow.python.summary.writer.event_file_writer": ("EventFileWriter.__init__",),
    "tensorflow.python.ops.gen_summary_ops": ("create_summary_file_writer",),
    "tensorflow.python.eager.context": ("context",),  # session_setup.py: the process's default config
    "tf_keras.src.optimizers.legacy.optimizer_v2": ("OptimizerV2.apply_gradients",),
    "tf_keras.src.engine.training": ("Model.save", "Model.save_weights"),
}

# attributes set on instances rather than defined on the class: checked in the class's code
_INSTANCE_ATTRIBUTES = {"_directory", "_checkpoint_prefix", "_maybe_delete", "_trainable_variables_indices", "_value",
                        "_shape", "_container"}


def installed_versions() -> dict[str, str]:
    """Version of each distribution in TESTED that is installed."""
    found = {}
    for name in TESTED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _in_series(version: str, series: str) -> bool:
    return version == series or version.startswith(series + ".")


# how deep code nested in a method (a function, lambda or comprehension inside it) is read
_NESTED_CODE_DEPTH = 4


def _code_names(code: CodeType, depth: int = _NESTED_CODE_DEPTH) -> set[str]:
    """The names `code` uses, with those of the code nested in it (its constants), `depth` levels
    down: `self._x = ...` inside a nested function or comprehension of a method counts too."""
    names = set(code.co_names)
    if depth:
        for constant in code.co_consts:
            if isinstance(constant, CodeType):
                names |= _code_names(constant, depth - 1)
    return names


def _class_code_names(cls: type) -> set[str]:
    """The attribute names the code of `cls` and its bases uses (`self._x = ...` puts `_x` there):
    where an attribute set on instances shows, without reading or parsing any source."""
    names: set[str] = set()
    for klass in cls.__mro__:
        for member in vars(klass).values():
            for function in (member, getattr(member, "__func__", None), getattr(member, "fget", None),
                             getattr(member, "fset", None)):
                code = getattr(function, "__code__", None)
                if isinstance(code, CodeType):
                    names |= _code_names(code)
    return names


@dataclass(frozen=True)
class ModeApi:
    """One runtime's tested distributions and the private attributes it uses."""

    mode: str  # as messages name it
    distributions: tuple[str, ...]  # of TESTED, the ones this mode's code touches
    private: Mapping[str, tuple[str, ...]]  # module -> attributes ("Class.method" for a method)
    # of `distributions`, those whose version counts only once the script has imported them (a graph
    # script need not use tf_keras, which may be installed for another script)
    when_imported: tuple[str, ...] = ()

    def untested(self, found: Mapping[str, str]) -> dict[str, str]:
        """The entries of `found` (distribution -> version) outside their tested release series."""
        return {name: version for name, version in found.items()
                if name in self.distributions and not _in_series(version, TESTED[name])
                and (name not in self.when_imported or name in sys.modules)}

    def missing_attributes(self, module_name: str) -> list[str]:
        """The attributes of `private[module_name]` that the imported module lacks, each named down
        to its first missing part (a missing class, not each of its methods)."""
        missing = []
        for path in self.private[module_name]:
            owner: object = sys.modules[module_name]
            parts = path.split(".")
            for depth, part in enumerate(parts, 1):
                if part in _INSTANCE_ATTRIBUTES and isinstance(owner, type):
                    present = part in _class_code_names(owner)
                else:
                    present = hasattr(owner, part)
                if not present:
                    missing.append(".".join([module_name, *parts[:depth]]))
                    break
                if part not in _INSTANCE_ATTRIBUTES:
                    owner = getattr(owner, part)
        return sorted(set(missing))

    def check_module(self, module_name: str) -> None:
        """Raise UserError naming the private attributes this mode needs that `module_name` lacks."""
        missing = self.missing_attributes(module_name)
        if missing:
            found = ", ".join(f"{n} {v}" for n, v in installed_versions().items())
            raise UserError(
                f"{self.mode} mode needs {', '.join(missing)}, which this installation ({found}) does not have; "
                f"it was tested with {self._tested_text()}")

    def check_tensorflow(self) -> None:
        """Raise UserError when TensorFlow lacks a private attribute this mode uses."""
        for module_name in self.private:
            if module_name.startswith("tensorflow."):
                importlib.import_module(module_name)
                self.check_module(module_name)

    def check_versions(self, allow_untested: bool | None = None, found: Mapping[str, str] | None = None) -> None:
        """Raise UserError when an installed distribution this mode touches is not of a tested
        series (unless `allow_untested`, default: the task's ADRUN_ALLOW_UNTESTED_VERSIONS
        setting), or when TensorFlow lacks a private attribute this mode uses. `found`
        (distribution -> version) replaces the installed versions, for tests."""
        self.check_series(self.distributions, allow_untested, found)
        self.check_tensorflow()

    def check_series(self, names: tuple[str, ...], allow_untested: bool | None = None,
                     found: Mapping[str, str] | None = None) -> None:
        """The version part of `check_versions`, for the distributions `names` only: a run-mode
        task checks one of `when_imported` again once the script imports it (import_hook.py)."""
        if allow_untested is None:
            from adrun.runtime.context import current

            allow_untested = current().settings.allow_untested_versions
        found = installed_versions() if found is None else found
        untested = self.untested({name: version for name, version in found.items() if name in names})
        wrong = ", ".join(f"{n} {v}" for n, v in sorted(untested.items()))
        if wrong and not allow_untested:
            raise UserError(
                f"{self.mode} mode was tested with {self._tested_text()}, and found {wrong}. It patches private "
                f"TensorFlow/Keras code, which may differ in other versions. Install a tested version, "
                f"or set {ALLOW_UNTESTED_VERSIONS_VAR}=1 to try anyway")
        if wrong:
            print(f"adrun: {self.mode} mode on untested {wrong} ({ALLOW_UNTESTED_VERSIONS_VAR}=1)", file=sys.stderr,
                  flush=True)

    def _tested_text(self) -> str:
        return ", ".join(f"{name} {TESTED[name]}.x" for name in self.distributions)


TF2 = ModeApi("TF2", ("tensorflow", "keras", "tf_keras"), _TF2_PRIVATE, when_imported=("tf_keras",))
GRAPH = ModeApi("graph", ("tensorflow", "tf_keras"), _GRAPH_PRIVATE, when_imported=("tf_keras",))

# what patches.install() replaces at `import tensorflow` in capture (the v1 optimizer and Session)
_GRAPH_CAPTURE_PATCHES: dict[str, tuple[str, ...]] = {
    "tensorflow.python.training.optimizer": ("Optimizer.apply_gradients",),
    # the patched apply_gradients asks it at every call (patches.py)
    "tensorflow.python.framework.ops": ("executing_eagerly_outside_functions",),
    "tensorflow.python.client.session": (
        "Session.__init__", "BaseSession.run", "BaseSession._make_callable_from_options",
    ),
}

# mode -> the part of GRAPH checked at `import tensorflow` (import_hook.py); all of GRAPH is checked
# once the script shows itself a graph script (capture.py, profiler.py)
GRAPH_AT_IMPORT: dict[Mode, ModeApi] = {
    Mode.CAPTURE: ModeApi("graph", GRAPH.distributions, _GRAPH_CAPTURE_PATCHES),
    Mode.PROFILE: ModeApi("graph", GRAPH.distributions, {  # and its scratch writes (no_trace.keep_writes_in)
        **_GRAPH_CAPTURE_PATCHES,
        "tensorflow.python.training.saver": ("Saver.save",),
        "tensorflow.python.summary.writer.event_file_writer": ("EventFileWriter.__init__",),
        "tensorflow.python.ops.gen_summary_ops": ("create_summary_file_writer",),
        "tensorflow.python.training.training_util": ("write_graph",),
    }),
}
