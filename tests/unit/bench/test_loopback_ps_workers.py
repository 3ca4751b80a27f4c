"""The n-worker PS step is adrun's synchronous step: pushes into accumulators on the PS, the chief's
takes and apply, the token queues; the one-worker step has none of them."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import tensorflow as tf

from bench.loopback_ps_workers import (CASES, deadline_s, line_fit, merged, step_ops, summary,
                                       synchronization_cpu_ms)
from strategies.cost_model import PS_CALL_CPU_S, PS_DENSE_PIECE_CPU_S, PS_SPARSE_PIECE_CPU_S
from tests.support.children import gone, kill_left, wait_for_files
from tests.support.paths import REPO

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
    assert "| 15.00 (15.00-15.00) | 1.00 |" in ps3 and ps3.endswith("| 5.00, +0.00 ± 0.00 |")
    tiny3 = next(line for line in table if line.startswith("| tiny_ps | 3 |"))
    assert "| 6.80 (6.80-6.80) | 1.13 |" in tiny3 and tiny3.endswith("| 2.40, -0.40 ± 0.00 |")
    # the model's own figure for the PS case at n = 3: 3 x (call + 2 sparse + 6 dense pieces)
    model = 3e3 * (PS_CALL_CPU_S + 2 * PS_SPARSE_PIECE_CPU_S + 6 * PS_DENSE_PIECE_CPU_S)
    assert f"| {model:.2f} |" in ps3


def test_the_fits_once_a_step_part_comes_with_its_standard_error():
    """Rounds 1 and 3 at n = 1, 3 and 5 at n = 2, 5 and 7 at n = 3: the line 2 n + 0 with residuals
    of +-1, so i's variance is 1.5 (1/6 + 4/4) = 1.75 (6 - 2 degrees of freedom, x mean 2, Sxx 4)."""
    s, i, se = line_fit([1, 1, 2, 2, 3, 3], [1, 3, 3, 5, 5, 7])
    assert (s, i, se) == pytest.approx((2.0, 0.0, 1.75 ** 0.5))
    assert all(v != v for v in line_fit([2, 2], [1, 3]))  # one n: no line
    runs = [{"workers": n, "results": [{"round": r, "case": c, "total_cpu_ms": v}
                                       for r, extra in enumerate((-0.5, 1.5))
                                       for c, v in {"local": 0.0, "tiny_local": 0.0, "ps": 2.0 * n + extra,
                                                    "embeddings_on_ps": 2.0 * n + extra,
                                                    "tiny_ps": 2.0 * n + extra}.items()]}
            for n in (1, 2, 3)]
    assert summary(runs).splitlines()[2].endswith("| 2.00, +0.50 ± 1.32 |")  # 0.5 ms once: same residuals


def test_the_run_bounds_its_steps():
    # start-up, then 5 cases x (200 warm-up + 3 x 1500 timed steps) x 0.1 s
    assert deadline_s(1500, 3) == pytest.approx(120 + 5 * 4700 * 0.1)


_FAKE_RUN = """
import os, sys
from pathlib import Path
import bench.loopback_ps_workers as run
pids = Path(sys.argv[1])
ready = "import os, sys; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1]); "
sleeper = ready + "import time; time.sleep(60)"
ps = ready + "import time; sys.stderr.write('port taken'); time.sleep(float(sys.argv[2])); raise SystemExit(1)"
run._ps_command = lambda spec, out: [sys.executable, "-c", ps, str(pids / "ps"), sys.argv[2]]
run._worker_command = lambda task, *_: [sys.executable, "-c", sleeper, str(pids / f"worker{task}")]
run.main(["--workers", "2", "--steps", "10", "--rounds", "1", "--out", str(pids / "out.json")])
"""
CHILDREN = ("ps", "worker0", "worker1")


@contextmanager
def _fake_run(tmp_path: Path, ps_lives_s: float) -> Iterator[tuple[subprocess.Popen, Path]]:
    """The run with a PS that fails after `ps_lives_s` and workers that sleep; whatever is left
    of it killed after the test."""
    pids = tmp_path / "pids"
    pids.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", _FAKE_RUN, str(pids), str(ps_lives_s)], cwd=REPO,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield parent, pids
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate()
        kill_left(int((pids / name).read_text()) for name in CHILDREN if (pids / name).exists())


def test_a_run_whose_ps_exits_early_fails_naming_it_and_leaves_no_child(tmp_path):
    with _fake_run(tmp_path, ps_lives_s=1) as (parent, pids):
        _, err = parent.communicate(timeout=120)
        assert parent.returncode == 1
        assert ("the PS exited (1) before the others finished (exit codes: the PS 1, worker 0 None, worker 1 None); "
                f"its output: {pids / 'out.ps.err'}") in err
        assert (pids / "out.ps.err").read_text() == "port taken"  # kept for reading
        # a worker killed before it wrote its pid is gone too
        assert [name for name in CHILDREN if (pids / name).exists() and not gone(int((pids / name).read_text()))] == []


def test_a_sigterm_to_the_run_kills_every_child_it_started(tmp_path):
    with _fake_run(tmp_path, ps_lives_s=60) as (parent, pids):
        wait_for_files(*(pids / name for name in CHILDREN), while_running=parent)
        parent.send_signal(signal.SIGTERM)
        parent.communicate(timeout=120)
        assert parent.returncode == 128 + signal.SIGTERM
        assert [name for name in CHILDREN if not gone(int((pids / name).read_text()))] == []
