"""The launcher -> task contract as one object (adrun/task_context.py): every variable the
launcher writes comes back as the same typed fact, and a bad value is refused by its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import adrun.task_context
from adrun.env_vars import CONTRACT_VARS, MODE_VAR, RESTART_COUNT_VAR, SETTING_VARS, WORKER_INDEX_VAR, Settings
from adrun.errors import UserError
from adrun.launch.env import run_context, task_env
from adrun.launch.job.tasks import Task
from adrun.task_context import AfterCapture, Mode, Role, TaskContext

pytestmark = pytest.mark.timeout(10)

CLUSTER = {"ps": ["localhost:2002"], "worker": ["localhost:2000", "localhost:2001"]}
EVERY_VARIABLE = {
    "ADRUN_MODE": "profile",
    "ADRUN_ROLE": "worker",
    "ADRUN_TASK_INDEX": "1",
    "ADRUN_WORKER_INDEX": "1",
    "ADRUN_NUM_WORKERS": "2",
    "ADRUN_JOB_ID": "job-7",
    "ADRUN_RESTART_COUNT": "3",
    "ADRUN_CLUSTER": '{"ps":["localhost:2002"],"worker":["localhost:2000","localhost:2001"]}',
    "ADRUN_STRATEGY_FILE": "/runs/job-7/strategy.yml",
    "ADRUN_CAPTURE_OUT": "/tmp/found.json",
    "ADRUN_PROFILE_WARMUP": "1",
    "ADRUN_PROFILE_STEPS": "20",
    "ADRUN_SCRATCH_DIR": "/tmp/scratch",
    "ADRUN_CAPTURE_ANSWER_FD": "5",
    "ADRUN_RELEASE_FD": "7",
    "ADRUN_SHARD_DATA": "1",
    "ADRUN_MAX_STEPS": "5",
    "ADRUN_INIT_TIMEOUT": "30",
    "ADRUN_OP_TIMEOUT": "2.5",
    "ADRUN_ALLOW_UNTESTED_VERSIONS": "1",
}


def test_every_variable_of_the_contract_and_every_setting_is_read():
    assert set(EVERY_VARIABLE) == set(CONTRACT_VARS + SETTING_VARS)  # the table above is complete
    assert TaskContext.from_env(EVERY_VARIABLE) == TaskContext(
        mode="profile", role="worker", task_index=1, num_workers=2, job_id="job-7", cluster=CLUSTER,
        strategy_file="/runs/job-7/strategy.yml", capture_out="/tmp/found.json", profile_warmup=1, profile_steps=20,
        scratch_dir="/tmp/scratch", capture_answer_fd=5, restart_count=3, release_fd=7,
        settings=Settings(shard_data=True, max_steps=5, init_timeout_s=30.0, op_timeout_s=2.5,
                          allow_untested_versions=True),
    )


@pytest.mark.parametrize("context", [
    TaskContext(mode=Mode.RUN, role=Role.WORKER, task_index=0, num_workers=1, job_id="j", cluster={}),
    TaskContext(mode=Mode.RUN, role=Role.WORKER, task_index=1, num_workers=2, job_id="j", cluster=CLUSTER,
                release_fd=9, settings=Settings(max_steps=5)),
    TaskContext(mode=Mode.RUN, role=Role.PS, task_index=1, num_workers=3, job_id="job-7", cluster=CLUSTER,
                strategy_file="/runs/job 7/strategy.yml", restart_count=2,
                settings=Settings(shard_data=True, max_steps=1, init_timeout_s=0.25, op_timeout_s=0.0)),
    TaskContext(mode=Mode.CAPTURE, role=Role.WORKER, task_index=0, num_workers=4, job_id="cap", cluster={},
                capture_out="/tmp/found.json"),
    TaskContext(mode=Mode.PROFILE, role=Role.WORKER, task_index=0, num_workers=1, job_id="p", cluster={},
                capture_out="/o.json", profile_warmup=0, profile_steps=20, scratch_dir="/s",
                settings=Settings(max_steps=40)),
    TaskContext(mode=Mode.PROFILE, role=Role.WORKER, task_index=0, num_workers=2, job_id="p", cluster={},
                capture_out="/o.json", profile_warmup=1, profile_steps=20, scratch_dir="/s", capture_answer_fd=3),
])
def test_a_context_written_to_the_environment_reads_back_equal(context):
    env = context.to_env()
    assert TaskContext.from_env(env) == context
    assert set(env) <= set(CONTRACT_VARS + SETTING_VARS)
    assert all(type(value) is str for value in env.values())  # the enums are written as their text
    assert env[MODE_VAR] == str(context.mode) and env["ADRUN_ROLE"] == context.role.value


def test_text_given_for_an_enum_field_is_held_as_the_enum():
    context = TaskContext(mode="run", role="ps", task_index=0, num_workers=1, job_id="j", cluster={})
    assert (context.mode, context.role) == (Mode.RUN, Role.PS)
    with pytest.raises(ValueError):
        TaskContext(mode="train", role="ps", task_index=0, num_workers=1, job_id="j", cluster={})


@pytest.mark.parametrize("name,value", [
    ("ADRUN_MODE", "train"),
    ("ADRUN_ROLE", "chief"),
    ("ADRUN_TASK_INDEX", "-1"),
    ("ADRUN_TASK_INDEX", "one"),
    ("ADRUN_RESTART_COUNT", "-1"),
    ("ADRUN_NUM_WORKERS", "0"),
    ("ADRUN_CLUSTER", "ps=a:1"),
    ("ADRUN_CLUSTER", '{"worker": "localhost:2000"}'),
    ("ADRUN_PROFILE_WARMUP", "-2"),
    ("ADRUN_PROFILE_STEPS", "2.5"),
    ("ADRUN_CAPTURE_ANSWER_FD", "-3"),
    ("ADRUN_RELEASE_FD", "pipe"),
    ("ADRUN_RELEASE_FD", "2"),
    ("ADRUN_CAPTURE_ANSWER_FD", "0"),
    ("ADRUN_SHARD_DATA", "yes"),
    ("ADRUN_MAX_STEPS", "0"),
    ("ADRUN_INIT_TIMEOUT", "soon"),
    ("ADRUN_OP_TIMEOUT", "-1"),
    ("ADRUN_ALLOW_UNTESTED_VERSIONS", "yes"),
])
def test_a_bad_value_is_refused_with_the_variables_name(name, value):
    with pytest.raises(UserError, match=f"^{name}='{re.escape(value)}': expected "):
        TaskContext.from_env({**EVERY_VARIABLE, name: value})


@pytest.mark.parametrize("fd", ["0", "1", "2"])
def test_stdin_stdout_or_stderr_is_refused_as_the_release_pipe(fd):
    """The worker closes its release pipe when released: fd 1 or 2 would take its output along."""
    with pytest.raises(UserError) as refused:
        TaskContext.from_env({**EVERY_VARIABLE, "ADRUN_RELEASE_FD": fd})
    assert str(refused.value) == (f"ADRUN_RELEASE_FD='{fd}': expected a pipe's file descriptor "
                                  "(0-2 are stdin, stdout and stderr), 3 or more")


@pytest.mark.parametrize("answer", list(AfterCapture))
def test_the_answer_after_capture_reads_back_as_sent(answer):
    assert AfterCapture.from_line(answer.as_line()) is answer


@pytest.mark.parametrize("line", [b"", b"prof", b"profile please\n", b"\xff\n"])
def test_anything_but_the_profile_answer_stops_the_process(line):
    """The end of the pipe (a launcher gone) and any garbage mean stop: never train unasked."""
    assert AfterCapture.from_line(line) is AfterCapture.STOP


def test_a_process_adrun_did_not_start_has_no_context():
    with pytest.raises(UserError, match=f"{MODE_VAR} is not set"):
        TaskContext.from_env({k: v for k, v in EVERY_VARIABLE.items() if k != MODE_VAR})


@pytest.mark.parametrize("task", [Task("worker", 1, "localhost", 2001), Task("ps", 0, "localhost", 2002)])
def test_what_the_launcher_writes_the_runtime_reads_back(task):
    """Both ends use the names of adrun.env_vars: a task's context is the launch's facts."""
    settings = Settings(shard_data=True, max_steps=7, op_timeout_s=0.0)
    launcher = {"ADRUN_INIT_TIMEOUT": "1", "ADRUN_MODE": "capture", "HOME": "/root"}  # neither reaches the task
    context = run_context(task, "job-7", 2, CLUSTER, strategy_file="/s.yml", restart_count=2, settings=settings)
    env = task_env(context, launcher, hook_dir="/hook")
    assert TaskContext.from_env(env) == context == TaskContext(
        mode=Mode.RUN, role=Role(task.role), task_index=task.index, num_workers=2, job_id="job-7", cluster=CLUSTER,
        strategy_file="/s.yml", restart_count=2, settings=settings,
    )
    # For the script: its worker index (like a rank) and which attempt this is.
    assert env.get(WORKER_INDEX_VAR) == (str(task.index) if task.role == "worker" else None)
    assert env[RESTART_COUNT_VAR] == "2"


def test_the_hook_checks_the_contracts_mode_variable():
    """The hook reads ADRUN_MODE by its literal name (importing the names would load adrun into
    processes where it stays inert); it must be the contract's."""
    hook = Path(adrun.task_context.__file__).parent / "hook" / "sitecustomize.py"
    assert f'os.environ.get("{MODE_VAR}")' in hook.read_text()
