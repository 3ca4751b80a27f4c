"""Walking a TF1 graph backwards: the ops a set of ops depends on, through data and control edges.

Rewrites ask it before adding a wait (would it close a cycle? would a fetch come to need a feed?)
and to find what a step's gradients are computed from."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

import tensorflow as tf


def upstream_ops(ops: Iterable[tf.Operation], skip: Collection[str] = ()) -> Iterator[tf.Operation]:
    """`ops` and every op they depend on, each once; an op named in `skip` is neither yielded nor
    walked through."""
    stack, seen = list(ops), set(skip)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        yield op
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)


def parents(op: tf.Operation) -> list[tf.Operation]:
    """The ops `op` takes an input from or waits for."""
    return [t.op for t in op.inputs] + list(op.control_inputs)
