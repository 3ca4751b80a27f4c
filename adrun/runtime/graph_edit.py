"""Editing a graph the script may already have finalized."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import tensorflow as tf


@contextmanager
def unfinalized(graph: tf.Graph) -> Iterator[tf.Graph]:
    """Allow adding ops to `graph` inside the block, finalized again afterwards if it was.

    MonitoredTrainingSession and tf_keras finalize the graph before creating their session, but
    adrun's rewrites happen at session creation and at the first fetch of a replicated tensor.
    """
    finalized = graph.finalized
    if finalized:
        graph._unsafe_unfinalize()
    try:
        yield graph
    finally:
        if finalized:
            graph.finalize()
