"""The collective benchmark's cases run the collective ops they are named after, K of them a step."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from bench.collective_cpu import _cases, deadline_s
from tests.support.children import assert_signal_leaves_no_child
from tests.support.paths import REPO


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


def test_the_run_is_bounded_by_its_cases_steps():
    # start-up, then (reduce_0, reduce_2, gather_2) x (100 warm-up + 3 x 1000 timed steps) x 0.1 s
    assert deadline_s([0, 2], 1000, 3) == pytest.approx(120 + 3 * 3100 * 0.1)


# the run with workers that write their pid and sleep: what it does when it is ended
_FAKE_RUN = """
import sys
import bench.collective_cpu as run
sleeper = "import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)"
run._worker_command = lambda index, *_: [sys.executable, "-c", sleeper, f"{sys.argv[1]}/worker{index}"]
run.main(["--steps", "10", "--rounds", "1", "--out", f"{sys.argv[1]}/out.json"])
"""


def test_a_sigterm_to_the_run_ends_it_through_killing_its_workers(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", _FAKE_RUN, str(tmp_path)], cwd=REPO, stdin=subprocess.DEVNULL)
    assert_signal_leaves_no_child(parent, signal.SIGTERM, 128 + signal.SIGTERM,
                                  [tmp_path / "worker0", tmp_path / "worker1"],
                                  lambda: [int((tmp_path / f"worker{i}").read_text()) for i in range(2)])
