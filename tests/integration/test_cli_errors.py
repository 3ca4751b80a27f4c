"""User mistakes end as one clear `adrun: error:` message, a non-zero exit, no traceback, and
nothing left running. Checks that need no script run before the capture, which takes seconds: the
tests prove it with a script that leaves a file behind as soon as it runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import psutil
import pytest

from adrun.exit_codes import PLAN_MISMATCH_EXIT_CODE
from adrun.launch.job.teardown import leftover_processes
from tests.support.adrun_cli import AdrunResult, flat, run_adrun
from tests.support.paths import REPO, SCRIPTS, TINY

pytestmark = pytest.mark.integration

TOUCH = str(SCRIPTS / "touch_and_sleep.py")


def error_lines(result: AdrunResult) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("adrun: error: ")]


def assert_clean_failure(result: AdrunResult, exit_code: int = 2) -> None:
    assert result.returncode == exit_code, result.output
    assert "Traceback" not in result.output, result.output
    assert leftover_processes(result.job_id) == []


def assert_script_not_run(marker: Path, result: AdrunResult) -> None:
    """The check came before the capture: the capture runs the script, which writes `marker` first."""
    assert not marker.exists(), f"the script ran, so the check came after the capture:\n{result.output}"
    assert "capturing" not in result.output


# --- 1. missing script --------------------------------------------------------------------------


def test_missing_script_names_it_and_the_cwd(tmp_path):
    result = run_adrun("no_such_train.py", "--steps", "3", cwd=tmp_path)
    assert_clean_failure(result)
    assert error_lines(result) == [f"adrun: error: script 'no_such_train.py' not found (looked in {tmp_path})"]


# --- 2. unknown strategy ------------------------------------------------------------------------


def test_unknown_strategy_lists_builders_before_capture(tmp_path):
    marker = tmp_path / "ran"
    result = run_adrun("--strategy", "Horovod", TOUCH, str(marker))
    assert_clean_failure(result)
    [line] = error_lines(result)
    assert line.startswith("adrun: error: unknown strategy builder 'Horovod'")
    known = line.split("known builders: ")[1].split(", ")
    assert {"PS", "PSLoadBalancing", "AllReduce"} <= set(known), line
    assert_script_not_run(marker, result)


def test_strategy_name_too_long_for_a_path(tmp_path):
    # Before: looking it up as a file raised a raw OSError (File name too long).
    marker = tmp_path / "ran"
    result = run_adrun("--strategy", "P" * 5000, TOUCH, str(marker))
    assert_clean_failure(result)
    [line] = error_lines(result)
    assert line.startswith(f"adrun: error: unknown strategy builder '{'P' * 5000}'")
    assert not marker.exists(), result.output


# --- 3. invalid cluster spec --------------------------------------------------------------------

_NODE = "version: 1\nnodes:\n  - address: localhost\n    workers: 2\n    ps: 1\n"


@pytest.mark.parametrize(
    "extra,message",
    [
        ("    wokers: 3\n", "nodes[0]: unknown field 'wokers' (did you mean 'workers'?)"),
        ("    base_port: lots\n", "nodes[0].base_port: expected a whole number, got 'lots'"),
    ],
    ids=["unknown-field", "wrong-type"],
)
def test_invalid_spec_names_file_and_field(tmp_path, extra, message):
    spec = tmp_path / "cluster.yml"
    spec.write_text(_NODE + extra)
    marker = tmp_path / "ran"
    result = run_adrun("--spec", str(spec), TOUCH, str(marker))
    assert_clean_failure(result)
    assert error_lines(result) == [f"adrun: error: {spec}: {message}"]
    assert_script_not_run(marker, result)


_BROKEN_SPECS = {
    # each of these once ended in a raw traceback (UnicodeError from the resolver, RecursionError
    # from the YAML parser) or was accepted and would have started 100,000 processes
    "long-address": ("version: 1\nnodes:\n  - address: " + "a" * 200_000 + "\n",
                     "nodes[0].address: 200000 characters; a hostname has at most 253"),
    "deep-nesting": ("version: 1\nnodes: " + "[" * 5000 + "]" * 5000 + "\n",
                     "line 2, column 71: nested more than 64 levels deep"),
    "too-many-workers": ("version: 1\nnodes:\n  - {address: localhost, cpus: 2, workers: 100000}\n",
                         "nodes[0].workers: 100000 worker(s) + 0 PS = 100000 processes; "
                         "a node with 2 CPU(s) runs at most 8 (4 per CPU)"),
}


@pytest.mark.parametrize("case", sorted(_BROKEN_SPECS))
def test_broken_spec_is_one_line_and_starts_nothing(tmp_path, case):
    text, message = _BROKEN_SPECS[case]
    spec = tmp_path / "cluster.yml"
    spec.write_text(text)
    marker = tmp_path / "ran"
    result = run_adrun("--spec", str(spec), TOUCH, str(marker))
    assert_clean_failure(result)
    assert result.output.splitlines() == [f"adrun: error: {spec}: {message}"]
    assert not marker.exists(), result.output


def test_missing_spec_file(tmp_path):
    spec = tmp_path / "nowhere.yml"
    marker = tmp_path / "ran"
    result = run_adrun("--spec", str(spec), TOUCH, str(marker))
    assert_clean_failure(result)
    assert error_lines(result) == [f"adrun: error: {spec}: file not found"]
    assert_script_not_run(marker, result)


# --- 4-6. scripts adrun cannot distribute ---------------------------------------------------------


@pytest.mark.parametrize("session", ["after-model", "first"])
def test_script_without_training_op(session):
    result = run_adrun("--quiet", TINY, "--no-train", "--session", session)
    assert_clean_failure(result)
    [line] = error_lines(result)
    assert line.startswith(f"adrun: error: {TINY}: its graph has no training op:"), line
    assert "minimize()" in line


def test_training_in_a_session_created_before_the_optimizer_is_refused():
    """Its variables exist when it is created, so it is kept local, as an evaluation graph's would be."""
    result = run_adrun("--quiet", TINY, "--session", "before-optimizer")
    assert_clean_failure(result)
    [line] = error_lines(result)
    assert line.startswith(f"adrun: error: {TINY}: a training step ran in a Session that adrun kept local"), line
    assert "create the Session after minimize()/apply_gradients()" in line, line


def test_eager_script_updating_its_variable_by_hand_is_told_what_was_seen():
    """No Session and no optimizer apply: neither mode has a step to synchronize, and the message
    says what the script did and what adrun needs."""
    script = str(SCRIPTS / "eager_script.py")
    result = run_adrun("--quiet", script)
    assert_clean_failure(result)
    [line] = error_lines(result)
    assert line.startswith(f"adrun: error: {script}: ran to its end without an optimizer apply: "
                           "it created 1 variable(s) (Variable), but no Keras or tf_keras optimizer applied gradients"), line
    assert "updates variables by hand (assign_sub, raw ops) is not supported" in line, line
    assert "tf.compat.v1.Session" in line, line


def test_script_failing_during_capture_shows_its_last_stderr_lines():
    script = str(SCRIPTS / "broken_import.py")
    result = run_adrun(script)
    assert result.returncode == 2, result.output
    assert leftover_processes(result.job_id) == []
    lines = result.stderr.splitlines()
    start = lines.index(f"adrun: error: {script}: failed before adrun captured its graph (exit code 1); "
                        "last lines of its stderr:")
    quoted = lines[start + 1:]
    assert quoted[0] == "    about to fail"
    assert quoted[-1] == "    ModuleNotFoundError: No module named 'tensorflow_but_misspelled'"
    # The only traceback shown is the script's, quoted; adrun itself did not crash.
    assert all(line.startswith("    ") for line in quoted)
    assert [line for line in lines if "Traceback" in line] == ["    Traceback (most recent call last):"]
    assert "adrun/cli/" not in result.output and "click" not in result.output


# --- 7. port conflict -----------------------------------------------------------------------------


def test_port_conflict_names_port_and_holder_before_anything_starts(tmp_path, spec_file):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        spec = spec_file(base_port=port)
        marker = tmp_path / "ran"
        result = run_adrun("--spec", str(spec), TOUCH, str(marker))
    assert_clean_failure(result)
    assert error_lines(result) == [
        f"adrun: error: port {port} on localhost is already in use (pid {os.getpid()}, "
        f"{_process_name()}): choose another base_port in the spec or stop that process"
    ]
    assert_script_not_run(marker, result)


def _process_name() -> str:
    return psutil.Process().name()


# --- 8. strategy documents ------------------------------------------------------------------------

_BAD_PLAN = """\
version: 1
builder: PS
options: {}
fingerprint: 0123456789abcdef
num_workers: 2
num_ps: 1
variables:
  - name: w
    shape: [2, 1]
    dtype: float32
    grad: dense
    sync: {kind: ps, ps_task: 5, sync: true, staleness: 0}
"""


def test_invalid_strategy_document_names_the_field_before_capture(tmp_path, spec_file):
    plan = tmp_path / "plan.yml"
    plan.write_text(_BAD_PLAN)
    marker = tmp_path / "ran"
    result = run_adrun("--spec", str(spec_file()), "--strategy", str(plan), TOUCH, str(marker))
    assert_clean_failure(result)
    assert error_lines(result) == [
        f"adrun: error: {plan}: variables[0].sync.ps_task: PS task 5 does not exist; num_ps is 1 (tasks 0..0)"
    ]
    assert_script_not_run(marker, result)


def test_strategy_document_of_another_script_is_refused(tmp_path, spec_file):
    spec = str(spec_file())
    plan = tmp_path / "plan.yml"
    # The documented form: adrun's options after the builder name, the script last.
    built = run_adrun("strategy", "build", "PS", "--spec", spec, "-o", str(plan),
                      str(REPO / "examples" / "linear_regression.py"), "--steps", "1")
    assert built.returncode == 0, built.output
    assert plan.is_file()

    result = run_adrun("--spec", spec, "--strategy", str(plan), TINY)
    assert_clean_failure(result)
    message = result.stderr[result.stderr.index("adrun: error: "):]
    assert message.startswith(f"adrun: error: {plan}: planned for a different graph (fingerprint "), message
    # linear_regression trains w [8, 1] and b; tiny_model trains w [2, 1] only.
    assert "not in the graph (or no longer trained): b" in flat(message)
    assert "'w' changed: shape [8, 1] -> [2, 1]" in flat(message)
    assert f"{plan}: plan again (--strategy PS) for this script and cluster" in message
    assert "adrun: job " not in result.output  # nothing was started


# --- 9. plan mismatch at run time -------------------------------------------------------------------


def test_worker_building_another_graph_is_the_root_cause(spec_file):
    result = run_adrun("--spec", str(spec_file()), "--strategy", "PSLoadBalancing", "--quiet", TINY, "--extra-var-on", "1")
    assert result.returncode == PLAN_MISMATCH_EXIT_CODE, result.output
    assert "Traceback" not in result.output, result.output
    assert leftover_processes(result.job_id) == []
    text = flat(result.stderr)
    assert "root cause: w1 failed" in text, result.stderr
    assert f"task w1 (worker 1) host localhost exit code {PLAN_MISMATCH_EXIT_CODE}" in text
    cause = text[text.index("root cause: w1 failed"):]
    assert "worker 1: the script built a different graph than the one planned" in cause
    assert "read ADRUN_WORKER_INDEX only to choose data" in cause
