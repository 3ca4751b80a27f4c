"""`each`: every item's call runs, at once up to MAX_WORKERS, results in item order, and the first
error in item order is raised only after all ran."""

import threading

import pytest

from adrun.launch.nodes.parallel import MAX_WORKERS, each


def test_results_come_in_item_order():
    assert each([3, 1, 2], lambda x: x * 10) == [30, 10, 20]
    assert each([], lambda x: x) == []


def test_the_first_error_in_item_order_is_raised_after_every_item_ran():
    """Item 0 fails only after item 2 failed: the error raised is still item 0's, and item 3,
    which waits for nothing, ran too."""
    later_failed = threading.Event()
    ran = []

    def fn(item):
        ran.append(item)
        if item == 0:
            assert later_failed.wait(timeout=30)
            raise ValueError("item 0")
        if item == 2:
            later_failed.set()
            raise KeyError("item 2")
        return item

    with pytest.raises(ValueError, match="item 0"):
        each([0, 1, 2, 3], fn)
    assert sorted(ran) == [0, 1, 2, 3]


def test_at_most_max_workers_run_at_once_and_as_many_do():
    """More items than the cap: each waits until MAX_WORKERS run together (so they do run at
    once); none sees more running than the cap."""
    lock = threading.Lock()
    running = [0]
    most = [0]
    full = threading.Event()

    def fn(item):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == MAX_WORKERS:
                full.set()
        assert full.wait(timeout=30)
        with lock:
            running[0] -= 1
        return item

    assert each(range(MAX_WORKERS + 8), fn) == list(range(MAX_WORKERS + 8))
    assert most[0] == MAX_WORKERS
