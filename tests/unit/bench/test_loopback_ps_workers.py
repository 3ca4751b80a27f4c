"""The n-worker PS step is adrun's synchronous step: pushes into accumulators on the PS, the chief's
takes and apply, the token queues; the one-worker step has none of them."""

from __future__ import annotations

import pytest
import tensorflow as tf

from bench.loopback_ps_workers import CASES, merged, step_ops, summary, synchronization_cpu_ms
from strategies.cost_model import PS_CALL_CPU_S, PS_DENSE_PIECE_CPU_S, PS_SPARSE_PIECE_CPU_S

PS = "/job:ps/task:0"


def _ops_by_case(task: int, num_workers: int) -> dict[str, list[str]]:
    """The types of the ops each case's step op needs (its whole subgraph)."""
    with tf.Graph().as_default():
        ops = step_ops(tf, task, num_workers)
        found = {}
        for case, op in ops.items():
            seen, todo = set(), [op]
            while todo:
                o = todo.pop()
                if o.name in seen:
                    continue
                seen.add(o.name)
                todo += [t.op for t in o.inputs] + list(o.control_inputs)
            graph = tf.compat.v1.get_default_graph()
            found[case] = [graph.get_operation_by_name(name) for name in seen]
        return {case: sorted((o.type, o.device) for o in needed) for case, needed in found.items()}


def _count(ops: list[tuple[str, str]], kind: str, device: str = PS) -> int:
    """Ops of type `kind` on `device`; a queue's ops, which TF's placer puts with their queue, on any."""
    return sum(1 for t, d in ops if t == kind and (d.startswith(device) or kind.startswith("Queue")))


@pytest.mark.full
def test_the_chief_takes_every_ps_pieces_sum_and_releases_the_others():
    ops = _ops_by_case(0, 3)
    assert set(ops) == set(CASES)
    ps = ops["ps"]
    # two embeddings, each its own sparse accumulator; six small dense gradients in one buffer
    assert _count(ps, "SparseAccumulatorApplyGradient") == _count(ps, "SparseAccumulatorTakeGradient") == 2
    assert _count(ps, "ResourceAccumulatorApplyGradient") == _count(ps, "ResourceAccumulatorTakeGradient") == 1
    assert _count(ps, "QueueEnqueueV2") == 2  # one token for each other worker
    emb = ops["embeddings_on_ps"]
    assert _count(emb, "SparseAccumulatorTakeGradient") == 2 and _count(emb, "ResourceAccumulatorTakeGradient") == 0
    assert _count(ops["tiny_ps"], "ResourceAccumulatorTakeGradient") == 1
    for case in ("local", "tiny_local"):
        assert not any(d.startswith(PS) for _, d in ops[case])


@pytest.mark.full
def test_another_worker_pushes_and_waits_for_its_token_without_taking():
    ops = _ops_by_case(2, 3)
    ps = ops["ps"]
    assert _count(ps, "SparseAccumulatorApplyGradient") == 2 and _count(ps, "ResourceAccumulatorApplyGradient") == 1
    assert not any("Take" in t for t, _ in ps)
    assert _count(ps, "QueueDequeueV2") == 1 and _count(ps, "QueueEnqueueV2") == 0
    # the dense layers of embeddings_on_ps are the worker's own: updated there, never pushed
    emb = ops["embeddings_on_ps"]
    assert _count(emb, "ResourceAccumulatorApplyGradient") == 0
    assert _count(emb, "ResourceApplyGradientDescent", "/job:worker/task:2") == 6


@pytest.mark.full
def test_one_worker_applies_on_the_ps_with_no_accumulator_or_token():
    ps = _ops_by_case(0, 1)["ps"]
    assert not any("Accumulator" in t or "Queue" in t for t, _ in ps)
    assert _count(ps, "ResourceApplyGradientDescent") == 6 and _count(ps, "ResourceScatterAdd") == 2


def test_merged_sums_every_workers_cpu_and_the_pss_per_round_and_case():
    rows = [{"round": 0, "case": "ps", "worker": 1, "cpu_ms": 3.0, "wall_ms": 9.0, "load_average": 1.0},
            {"round": 0, "case": "ps", "worker": 0, "cpu_ms": 4.0, "wall_ms": 8.0, "load_average": 2.0,
             "ps_cpu_ms": 5.0},
            {"round": 1, "case": "local", "worker": 0, "cpu_ms": 1.0, "wall_ms": 1.0, "load_average": 2.0,
             "ps_cpu_ms": 0.0}]
    out = merged(rows)
    assert [(r["round"], r["case"]) for r in out] == [(0, "ps"), (1, "local")]
    assert out[0]["worker_cpu_ms"] == [4.0, 3.0]  # the chief first
    assert out[0]["total_cpu_ms"] == 12.0 and out[0]["wall_ms"] == 8.0  # the chief's window


def test_a_cases_synchronization_is_its_cpu_beyond_its_local_counterparts_of_the_same_round():
    results = [{"round": r, "case": case, "total_cpu_ms": value}
               for r, values in enumerate(({"local": 2.0, "ps": 12.0, "embeddings_on_ps": 9.0, "tiny_local": 0.5,
                                            "tiny_ps": 4.0},
                                           {"local": 3.0, "ps": 11.0, "embeddings_on_ps": 10.0, "tiny_local": 1.0,
                                            "tiny_ps": 4.5}))
               for case, value in values.items()]
    assert synchronization_cpu_ms(results) == {"ps": [10.0, 8.0], "embeddings_on_ps": [7.0, 7.0],
                                               "tiny_ps": [3.5, 3.5]}


def test_the_summary_sets_each_n_against_n_times_one_worker_and_fits_the_line_over_n():
    """A synchronization costing exactly n times its one-worker CPU reads 1.00 at every n, and the
    line over n has that CPU as its slope and no once-a-step part."""
    def run(n: int) -> dict:
        per_case = {"local": 1.0 * n, "tiny_local": 0.5 * n, "ps": 1.0 * n + 5 * n, "embeddings_on_ps": 1.0 * n + 3 * n,
                    "tiny_ps": 0.5 * n + 2 * n + 0.4 * (n - 1)}  # tiny: 0.4 ms more for each other worker
        return {"workers": n, "results": [{"round": 0, "case": c, "total_cpu_ms": v} for c, v in per_case.items()]}

    table = summary([run(1), run(2), run(3)]).splitlines()
    ps3 = next(line for line in table if line.startswith("| ps | 3 |"))
    assert "| 15.00 (15.00-15.00) | 1.00 |" in ps3 and ps3.endswith("| 5.00, +0.00 |")
    tiny3 = next(line for line in table if line.startswith("| tiny_ps | 3 |"))
    assert "| 6.80 (6.80-6.80) | 1.13 |" in tiny3 and tiny3.endswith("| 2.40, -0.40 |")
    # the model's own figure for the PS case at n = 3: 3 x (call + 2 sparse + 6 dense pieces)
    model = 3e3 * (PS_CALL_CPU_S + 2 * PS_SPARSE_PIECE_CPU_S + 6 * PS_DENSE_PIECE_CPU_S)
    assert f"| {model:.2f} |" in ps3


def test_a_failed_worker_ends_the_wait_while_the_others_still_run():
    """The others wait for the chief forever when it fails: the run must not wait for them."""
    import subprocess
    import sys

    from bench.loopback_ps_workers import _wait_all

    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        assert _wait_all([failed, waiting]) == [3, None]
    finally:
        waiting.kill()
        waiting.wait()
