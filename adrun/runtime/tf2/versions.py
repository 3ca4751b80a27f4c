"""The TensorFlow, Keras and tf_keras versions TF2 mode was tested with, and the private APIs it
touches.

TF2 mode patches private code (`keras.src` optimizers, callbacks and data adapters,
`tensorflow.python` collective ops and checkpoint classes), which may change in any release. So a
task on an untested version stops with one message naming what it found, what was tested and the
setting to try anyway, instead of failing deep inside a trace; a missing private attribute is named
whatever the setting, since nothing can work without it.

`check_versions()` reads versions from package metadata (no import) and checks the TensorFlow
attributes (their modules are loaded by `import tensorflow`). The Keras and tf_keras attributes are
checked by `check_module` right after their module is imported (around.py): importing Keras from
here could run while the script's own `import keras` is half done.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import sys
from collections.abc import Mapping

from adrun.env_vars import ALLOW_UNTESTED_VERSIONS_VAR
from adrun.errors import UserError

# distribution -> the release series (major.minor) TF2 mode was tested with
TESTED: dict[str, str] = {"tensorflow": "2.21", "keras": "3.15", "tf_keras": "2.21"}

# module -> the attributes adrun's TF2 mode reads or replaces in it ("Class.method" for a method)
PRIVATE_API: dict[str, tuple[str, ...]] = {
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
    "keras.src.optimizers.base_optimizer": ("BaseOptimizer.apply", "BaseOptimizer.add_variable_from_reference"),
    "keras.src.backend.tensorflow.optimizer": ("TFOptimizer.add_variable_from_reference",
                                               "TFOptimizer._distributed_tf_update_step"),
    # ps_atomic.py; ps_gather.py and row_reads.py add Variable.sparse_read, which tf.gather uses
    # (test_ps_gather.py, test_row_reads.py)
    "keras.src.backend.tensorflow.core": (
        "Variable.assign_add", "Variable.assign_sub", "Variable._convert_to_tensor", "Variable.value",
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

# attributes set on instances by __init__ rather than defined on the class: checked on the source
_INSTANCE_ATTRIBUTES = {"_directory", "_checkpoint_prefix", "_maybe_delete"}


def installed_versions() -> dict[str, str]:
    """Version of each distribution in TESTED that is installed."""
    found = {}
    for name in TESTED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def untested(found: Mapping[str, str]) -> dict[str, str]:
    """The entries of `found` (distribution -> version) outside their tested release series."""
    return {name: version for name, version in found.items()
            if name in TESTED and not _in_series(version, TESTED[name])}


def _in_series(version: str, series: str) -> bool:
    return version == series or version.startswith(series + ".")


def missing_attributes(module_name: str) -> list[str]:
    """The attributes of PRIVATE_API[module_name] that the imported module lacks, each named down
    to its first missing part (a missing class, not each of its methods)."""
    missing = []
    for path in PRIVATE_API[module_name]:
        owner: object = sys.modules[module_name]
        parts = path.split(".")
        for depth, part in enumerate(parts, 1):
            if part in _INSTANCE_ATTRIBUTES and inspect.isclass(owner):
                present = f"self.{part}" in inspect.getsource(owner)
            else:
                present = hasattr(owner, part)
            if not present:
                missing.append(".".join([module_name, *parts[:depth]]))
                break
            if part not in _INSTANCE_ATTRIBUTES:
                owner = getattr(owner, part)
    return sorted(set(missing))


def check_module(module_name: str) -> None:
    """Raise UserError naming the private attributes adrun needs that `module_name` lacks."""
    missing = missing_attributes(module_name)
    if missing:
        found = ", ".join(f"{n} {v}" for n, v in installed_versions().items())
        raise UserError(
            f"TF2 mode needs {', '.join(missing)}, which this installation ({found}) does not have; "
            f"it was tested with {_tested_text()}")


def check_versions(allow_untested: bool | None = None, found: Mapping[str, str] | None = None) -> None:
    """Raise UserError when an installed TensorFlow, Keras or tf_keras is not of a tested series
    (unless `allow_untested`, default: the task's ADRUN_ALLOW_UNTESTED_VERSIONS setting), or when
    TensorFlow lacks a private attribute TF2 mode uses. `found` (distribution -> version) replaces
    the installed versions, for tests."""
    if allow_untested is None:
        from adrun.runtime.context import current

        allow_untested = current().settings.allow_untested_versions
    found = installed_versions() if found is None else found
    wrong = ", ".join(f"{n} {v}" for n, v in sorted(untested(found).items()))
    if wrong and not allow_untested:
        raise UserError(
            f"TF2 mode was tested with {_tested_text()}, and found {wrong}. It patches private "
            f"TensorFlow/Keras code, which may differ in other versions. Install a tested version, "
            f"or set {ALLOW_UNTESTED_VERSIONS_VAR}=1 to try anyway")
    if wrong:
        print(f"adrun: TF2 mode on untested {wrong} ({ALLOW_UNTESTED_VERSIONS_VAR}=1)", file=sys.stderr, flush=True)
    for module_name in PRIVATE_API:
        if module_name.startswith("tensorflow."):
            importlib.import_module(module_name)
            check_module(module_name)


def _tested_text() -> str:
    return ", ".join(f"{name} {series}.x" for name, series in TESTED.items())
