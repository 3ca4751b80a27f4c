"""The collective benchmark's cases run the collective ops they are named after, K of them a step."""

from __future__ import annotations

import tensorflow as tf

from bench.collective_cpu import _cases


def _collectives(op: tf.Operation) -> list[tf.Operation]:
    """The collective ops `op` depends on (its control inputs and their inputs, transitively)."""
    seen, todo, found = set(), [op], []
    while todo:
        node = todo.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        if node.type.startswith("Collective"):
            found.append(node)
        todo.extend([t.op for t in node.inputs] + list(node.control_inputs))
    return found


def test_each_case_runs_k_reduces_or_k_gathers_under_distinct_keys():
    with tf.Graph().as_default():
        ops = _cases(tf, [0, 1, 4], 16)
        assert set(ops) == {"reduce_0", "reduce_1", "gather_1", "reduce_4", "gather_4"}
        assert _collectives(ops["reduce_0"]) == []
        reduces = _collectives(ops["reduce_4"])
        assert [op.type for op in reduces] == ["CollectiveReduceV2"] * 4
        assert [op.type for op in _collectives(ops["gather_4"])] == ["CollectiveGatherV2"] * 4
        keys = {int(tf.get_static_value(op.inputs[3])) for op in reduces + _collectives(ops["reduce_1"])}
        assert len(keys) == 5  # no two ops of the fixed-key cases pair up with each other
