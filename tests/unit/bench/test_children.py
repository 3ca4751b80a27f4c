"""A run's children end together: one past the deadline is killed and named, one that fails gets the
others killed (process groups, descendants that left them, one that ignores SIGTERM), a server that
ends fails the run, and a SIGTERM or Ctrl-C to the parent leaves no child behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.children import Children, Role
from tests.support.children import assert_signal_leaves_no_child, gone, wait_for_files
from tests.support.paths import REPO
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def exits(code: int) -> list[str]:
    return [sys.executable, "-c", f"raise SystemExit({code})"]


# a child that starts a grandchild in its own group and one in a session of its own, writes
# {"pids": [...]} to argv[1] and sleeps; with argv[2] == "stubborn" it ignores SIGTERM
FAMILY = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    if sys.argv[2] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grouped, apart = subprocess.Popen(sleep), subprocess.Popen(sleep, start_new_session=True)
    with open(sys.argv[1] + ".tmp", "w") as out:
        json.dump({"pids": [os.getpid(), grouped.pid, apart.pid]}, out)
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
""")


def family(pids: Path, stubborn: bool = False) -> list[str]:
    return [sys.executable, "-c", FAMILY, str(pids), "stubborn" if stubborn else "plain"]


def test_a_child_past_the_deadline_is_killed_and_named():
    with Children() as children:
        done = children.start("done", exits(0))
        late = children.start("late", SLEEP)
        done.proc.wait()
        failure = children.wait(timeout_s=0)
    assert failure is not None and failure.child is late and failure.code is None
    assert failure.codes == {"done": 0, "late": None}
    assert str(failure) == "the run passed its deadline of 0 s with late still running (exit codes: done 0, late None)"
    assert late.proc.returncode == -signal.SIGTERM
    assert done.proc.returncode == 0


def test_a_failed_child_gets_the_others_killed_with_their_groups_and_descendants(tmp_path):
    with Children(grace_s=1.0) as children:
        ps = children.start("ps", family(tmp_path / "ps.json"), role=Role.SERVER)
        stubborn = children.start("worker 1", family(tmp_path / "w1.json", stubborn=True))
        wait_for_files(tmp_path / "ps.json", tmp_path / "w1.json")
        failing = children.start("worker 0", exits(3), log=tmp_path / "w0.log")
        failure = children.wait(timeout_s=600, poll_s=0.02)
    assert failure is not None and failure.child is failing and failure.code == 3
    assert failure.codes == {"ps": None, "worker 1": None, "worker 0": 3}
    assert str(failure) == ("worker 0 failed (exit code 3) (exit codes: ps None, worker 1 None, worker 0 3); "
                            f"its output: {tmp_path / 'w0.log'}")
    assert ps.proc.returncode == -signal.SIGTERM
    assert stubborn.proc.returncode == -signal.SIGKILL  # it ignored the stop signal
    pids = [pid for name in ("ps.json", "w1.json") for pid in json.loads((tmp_path / name).read_text())["pids"]]
    assert [pid for pid in pids if not gone(pid)] == []


def test_a_server_that_ends_fails_the_run_and_a_waited_child_that_ends_well_does_not():
    with Children() as children:
        children.start("the PS", exits(0), role=Role.SERVER).proc.wait()
        children.start("worker 0", exits(0)).proc.wait()
        assert children.wait(timeout_s=600) is None  # every waited child done: the PS's end is too late to matter
        children.start("worker 1", SLEEP)
        failure = children.wait(timeout_s=600)
    assert failure is not None and failure.child.name == "the PS"
    assert str(failure) == "the PS exited (0) before the others finished (exit codes: the PS 0, worker 0 0, worker 1 None)"


@pytest.mark.parametrize(("code", "fails"), [(0, False), (1, True)])
def test_a_child_beside_the_run_fails_it_only_by_a_nonzero_exit(code, fails):
    with Children() as children:
        children.start("ps", exits(code), role=Role.BESIDE).proc.wait()
        children.start("worker", SLEEP)
        failure = children.wait(timeout_s=0)
    assert failure is not None and failure.child.name == ("ps" if fails else "worker")


def test_a_child_name_is_used_once():
    with Children() as children:
        children.start("w", exits(0))
        with pytest.raises(ValueError, match="a child named 'w' was started already"):
            children.start("w", exits(0))


def test_sigterm_exits_only_where_no_handler_was_installed():
    def mine(signum: int, frame: object) -> None:
        pass

    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with Children():
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, mine)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        signal.signal(signal.SIGTERM, mine)
        with Children():  # bench.cluster.run's own SIGTERM handler (Ctrl-C's path) stays
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


PARENT = textwrap.dedent("""
    import signal, sys
    from pathlib import Path
    from bench.children import Children
    signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test's process ignores
    family, out = sys.argv[1], Path(sys.argv[2])
    with Children() as children:
        for i in range(2):
            children.start(f"worker {i}", [sys.executable, "-c", family, str(out / f"w{i}.json"), "plain"])
        children.wait(timeout_s=600)
""")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)])
def test_a_sigterm_or_ctrl_c_to_the_parent_leaves_no_child(tmp_path, sig, code):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, FAMILY, str(tmp_path)], cwd=REPO, stdin=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    # to the parent alone: its children are in sessions of their own
    assert_signal_leaves_no_child(
        parent, sig, code, [tmp_path / "w0.json", tmp_path / "w1.json"],
        lambda: [pid for i in range(2) for pid in json.loads((tmp_path / f"w{i}.json").read_text())["pids"]])
