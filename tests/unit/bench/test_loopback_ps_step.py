"""The one-worker PS step's cases place the variables where the plans they stand for put them."""

from __future__ import annotations

import tensorflow as tf

from bench.loopback_ps_step import CASES, _train_ops

WORKER, PS = "/job:worker/task:0", "/job:ps/task:0"


def test_each_case_places_its_variables_as_the_plan_it_stands_for():
    with tf.Graph().as_default():
        ops = _train_ops(tf, WORKER, PS)
        where = {v.op.name: v.device for v in tf.compat.v1.global_variables()}
    assert set(ops) == set(CASES)
    on_ps = {name for name, device in where.items() if device == PS}

    def of(case: str) -> set[str]:
        return {name for name in where if name.startswith(f"{case}/")}

    assert of("local") and not of("local") & on_ps  # the plain run: all on the worker
    assert of("ps") and of("ps") <= on_ps  # the PS plan: all on the PS
    assert of("embeddings_on_ps") & on_ps == {"embeddings_on_ps/user_embedding", "embeddings_on_ps/item_embedding"}
    assert "tiny_ps" in on_ps and "tiny_local" not in on_ps
    assert "wide_ps" in on_ps and "wide_local" not in on_ps
    # only the global_step case increments adrun's shared state on the PS (kernels/placement.py)
    assert "global_step" in on_ps
    assert ops["embeddings_on_ps_global_step"].type == "AssignAddVariableOp"
    assert ops["embeddings_on_ps_global_step"].inputs[0].op.name == "global_step"
    assert ops["embeddings_on_ps"].type == "NoOp"


def test_the_wide_cases_variable_has_the_rows_asked_for():
    """`--wide-rows` sets the bytes the wide cases move per step (rows x 1000 float32, each way)."""
    with tf.Graph().as_default():
        _train_ops(tf, WORKER, PS, wide_rows=3)
        shapes = {v.op.name: v.shape.as_list() for v in tf.compat.v1.global_variables()}
    assert shapes["wide_ps"] == shapes["wide_local"] == [3, 1000]


def test_a_chain_of_k_hops_alternates_between_the_ps_and_the_worker():
    """`--hops`: chain_K's K ops each need the one before, the first on the PS, then the worker,
    ...; the sum that ends the step is on the worker, so 2 * ceil(K / 2) messages cross between
    the processes, one after another. chain_0 stays on the worker."""
    from bench.loopback_ps_step import _chain_ops

    with tf.Graph().as_default():
        ops = _chain_ops(tf, WORKER, PS, [0, 3])
        assert set(ops) == {"chain_0", "chain_3"}
        devices = []
        op = ops["chain_3"].inputs[0].op  # the sum's input: the last op of the chain
        while op.type in ("Sin", "Cos"):  # back to the read (ReadVariableOp, Identity)
            devices.append(op.device)
            op = op.inputs[0].op
        assert devices[::-1] == [PS, WORKER, PS]
        assert ops["chain_0"].inputs[0].op.type in ("ReadVariableOp", "Identity")  # the read, no hop
        assert ops["chain_0"].device == ops["chain_3"].device == WORKER
