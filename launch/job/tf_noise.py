"""TensorFlow's start-up noise: lines every TF process writes on stderr that say nothing about the script.

Why: a failed task's last stderr lines were often these (a worker killed by SIGKILL before it
said anything else showed `failed call to cuInit`), and three tasks starting print some 20 of
them before the first line of the script. They are left out of a failure's root cause and folded
in the live view (`adrun run --verbose` shows them); log files keep every line.

The known lines, one pattern each (the C++ ones carry absl's prefix, `I0000 00:00:<epoch> <tid>
<file>:<line>] `: TF never calls absl::InitializeLog, so its date stays zero):

- `absl-preinit`: `WARNING: All log messages before absl::InitializeLog() is called are written
  to STDERR`, abseil-cpp's logging saying so at the first log call (twice in each TF 2.21 process
  seen here, each time before the oneDNN and CUDA lines again).
- `onednn`: `port.cc:...] oneDNN custom operations are on. ...`, from
  tensorflow/core/util/port.cc on x86 builds (TF_ENABLE_ONEDNN_OPTS=0 turns it off).
- `cuda-stub`: `cudart_stub.cc:...] Could not find cuda drivers on your machine, GPU will not be
  used.`, from TSL's CUDA runtime stub (xla/tsl/cuda/cudart_stub.cc) on a machine without a GPU
  driver.
- `cuinit`: `E... cuda_platform.cc:...] failed call to cuInit: ...` (older releases:
  cuda_driver.cc), from XLA's stream executor when the first session looks for GPUs; an error by
  its level, noise on every machine without a GPU.
- `cpu-features`: `cpu_feature_guard.cc:...] This TensorFlow binary is optimized to use available
  CPU instructions ...` and its second line `To enable the following instructions: ... rebuild
  TensorFlow with the appropriate compiler flags.`, from tensorflow/core/platform/cpu_feature_guard.cc.
- `mlir-v1`: `mlir_graph_optimization_pass.cc:...] MLIR V1 optimization pass is not enabled`, from
  tensorflow/compiler/mlir, at a graph's first run.
- `grpc-server`: `grpc_server_lib.cc:...] Started server with target: grpc://...`, from
  tensorflow/core/distributed_runtime/rpc when a task's server starts.
- `tf-deprecation`: `WARNING:tensorflow:From <file>:<line>: <name> (from <module>) is deprecated
  and will be removed ...`, then `Instructions for updating:` and the instructions (one or a few
  lines), from tensorflow/python/util/deprecation.py; also its one-line form
  `WARNING:tensorflow:<name> is deprecated ...`.
- `py-deprecation`: `<file>.py:<line>: UserWarning: `tf....` is deprecated ...` and the source line
  Python's warnings module prints under it (two spaces in), from tf_keras' legacy layers and
  tf.compat.v1 RNN cells.

A line is classified in the context of the lines before it on the same stream (the continuation
lines of `tf-deprecation` and `py-deprecation` carry no mark of their own), so each stream of each
task has its own `NoiseFilter`.
"""

from __future__ import annotations

import re

_CPP = r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ "
PATTERNS: dict[str, re.Pattern[str]] = {
    "absl-preinit": re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written"
                               r" to STDERR$"),
    "onednn": re.compile(_CPP + r"port\.cc:\d+\] oneDNN custom operations are on\."),
    "cuda-stub": re.compile(_CPP + r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine"),
    "cuinit": re.compile(_CPP + r"cuda_(platform|driver)\.cc:\d+\] failed call to cuInit"),
    "cpu-features": re.compile(_CPP + r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized"
                               r"|^To enable the following instructions: .* rebuild TensorFlow with the appropriate"
                               r" compiler flags\.$"),
    "mlir-v1": re.compile(_CPP + r"mlir_graph_optimization_pass\.cc:\d+\] MLIR V1 optimization pass is not enabled$"),
    "grpc-server": re.compile(_CPP + r"grpc_server_lib\.cc:\d+\] Started server with target: grpc://"),
    "tf-deprecation": re.compile(r"^WARNING:tensorflow:(From \S+:\d+: )?.* is deprecated\b"),
    "py-deprecation": re.compile(r"^\S+\.py:\d+: \w*Warning: `tf\.\S+` is deprecated\b"),
}
_INSTRUCTIONS = "Instructions for updating:"
_MAX_INSTRUCTION_LINES = 6  # the longest instructions in TF 2.21's deprecation decorators span a few lines
# Where a deprecation's instructions end at the latest: the next log record, warning or traceback.
_RECORD_START = re.compile(_CPP + r"|^(WARNING|INFO|ERROR|CRITICAL|DEBUG|FATAL)[:\s]|^Traceback |^\S+\.py:\d+: \w+: ")


class NoiseFilter:
    """Says, line by line, whether one stream's line is TensorFlow start-up noise."""

    def __init__(self) -> None:
        self._follow: str | None = None  # what the previous line leads us to expect
        self._instruction_lines = 0

    def is_noise(self, line: str) -> bool:
        follow, self._follow = self._follow, None
        if follow == "instructions-header" and line == _INSTRUCTIONS:
            self._follow, self._instruction_lines = "instructions", 0
            return True
        if follow == "instructions" and line.strip() and not _RECORD_START.match(line):
            self._instruction_lines += 1
            if self._instruction_lines < _MAX_INSTRUCTION_LINES:
                self._follow = "instructions"
            return True
        if follow == "source-line" and line.startswith("  ") and line.strip():
            return True
        kind = self.kind(line)
        if kind == "tf-deprecation":
            self._follow = "instructions-header"
        elif kind == "py-deprecation":
            self._follow = "source-line"
        return kind is not None

    @staticmethod
    def kind(line: str) -> str | None:
        """The name of the pattern `line` matches on its own (continuation lines match none)."""
        return next((name for name, pattern in PATTERNS.items() if pattern.search(line)), None)

