"""Orders a synchronous step between workers when the step also runs collectives.

TensorFlow gives every worker's step of a graph with collectives the same step id (the collective
group leader hands out one sequence, so the workers' collectives pair up), and it assumes each
worker's graph then runs on that worker's own task only. A plan that mixes all-reduce and PS
variables breaks that assumption: the chief and the other workers all have work on the PS tasks
under one step id. When a worker's step ends, its master cleans that step id up on every task the
step touched, aborting whatever another worker still has pending there under the same id (seen as
`AbortedError: Cleanup <step id>` on a non-chief waiting for its release token on PS 0).

So in such a step no worker waits on a PS queue. The workers meet in one-number all-gathers
instead (`Collectives.barrier`): one at the end of the step after every PS interaction of the step
(the chief's whole update, the others' pushes), and, only when the optimizer's own updates read
state its finish step changes (e.g. Adam's beta powers; gradient_sync.py decides), one after each
worker's own updates, which the chief's finish waits for. No worker's step can end, and clean up,
before every worker has finished all its work on the PS tasks.
"""

from __future__ import annotations

import tensorflow as tf

from adrun.runtime.kernels.allreduce_sync import Collectives


class CollectiveStepOrder:
    """The `StepTokens` protocol through collective barriers (same methods, same guarantees)."""

    def __init__(self, collectives: Collectives, call_index: int) -> None:
        self.collectives = collectives
        self.prefix = f"step/{call_index}"

    def own_updates_applied(self, worker: int, own_updates: list[tf.Operation]) -> tf.Operation:
        """Completes once every worker has applied its own updates of the step."""
        return self.collectives.barrier(f"{self.prefix}/own_updates_applied", own_updates)

    def end_step(self, worker: int, after: list[tf.Operation]) -> tf.Operation:
        """Completes once every worker has run its `after` (chief: the whole step; others: pushes
        and own updates)."""
        return tf.group(self.collectives.barrier(f"{self.prefix}/end", after), name="adrun_sync_step")
