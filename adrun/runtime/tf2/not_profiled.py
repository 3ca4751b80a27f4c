"""Profile mode (`adrun profile`, `--strategy Auto`) on a TF2 script: refused at its first optimizer
apply, a few seconds in, instead of after the script has trained to its end and left nothing to
profile (profile mode times Session steps: adrun/runtime/profiler.py)."""

from __future__ import annotations

from typing import Any, NoReturn

from adrun.runtime.refusal import refuse

NOT_PROFILED = (
    "this is a TF2 script (an optimizer applied gradients eagerly or in a tf.function), and adrun profile "
    "and --strategy Auto do not support TF2 scripts yet: run it with --strategy AllReduce (what a TF2 "
    "script gets when no --strategy is given; --strategy-opt chunk_size=..., compressor=...) or with a "
    "strategy document (adrun strategy build)"
)


class RefuseProfile:
    """Profile mode's ApplyHook (optimizer_hooks.py): refuse at the first TF2 apply. A graph-mode
    apply (a tf_keras optimizer in a script that disabled eager execution) is the profiler's."""

    def before(self, optimizer: Any, grads: list[Any], variables: list[Any]) -> list[Any] | NoReturn:
        from tensorflow.python.framework import ops

        if not ops.executing_eagerly_outside_functions():
            return grads
        refuse(NOT_PROFILED)
