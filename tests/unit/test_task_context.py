"""The runtime's one reading of the env contract (adrun/runtime/context.py): every variable the
launcher writes comes back as the same typed fact, and a bad value is refused by its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import adrun.runtime.context
from adrun.env_vars import CONTRACT_VARS, MODE_VAR, RESTART_COUNT_VAR, SETTING_VARS, WORKER_INDEX_VAR, Settings
from adrun.errors import UserError
from adrun.launch.env import task_env
from adrun.launch.job.tasks import Task
from adrun.runtime.context import TaskContext

pytestmark = pytest.mark.timeout(10)

CLUSTER = {"ps": ["localhost:2002"], "worker": ["localhost:2000", "localhost:2001"]}
EVERY_VARIABLE = {
    "ADRUN_MODE": "profile",
    "ADRUN_ROLE": "worker",
    "ADRUN_TASK_INDEX": "1",
    "ADRUN_WORKER_INDEX": "1",
    "ADRUN_NUM_WORKERS": "2",
    "ADRUN_JOB_ID": "job-7",
    "ADRUN_RESTART_COUNT": "0",
    "ADRUN_CLUSTER": '{"ps":["localhost:2002"],"worker":["localhost:2000","localhost:2001"]}',
    "ADRUN_STRATEGY_FILE": "/runs/job-7/strategy.yml",
    "ADRUN_CAPTURE_OUT": "/tmp/found.json",
    "ADRUN_PROFILE_WARMUP": "1",
    "ADRUN_PROFILE_STEPS": "20",
    "ADRUN_SCRATCH_DIR": "/tmp/scratch",
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
        scratch_dir="/tmp/scratch",
        settings=Settings(shard_data=True, max_steps=5, init_timeout_s=30.0, op_timeout_s=2.5,
                          allow_untested_versions=True),
    )


@pytest.mark.parametrize("name,value", [
    ("ADRUN_MODE", "train"),
    ("ADRUN_ROLE", "chief"),
    ("ADRUN_TASK_INDEX", "-1"),
    ("ADRUN_TASK_INDEX", "one"),
    ("ADRUN_NUM_WORKERS", "0"),
    ("ADRUN_CLUSTER", "ps=a:1"),
    ("ADRUN_CLUSTER", '{"worker": "localhost:2000"}'),
    ("ADRUN_PROFILE_WARMUP", "-2"),
    ("ADRUN_PROFILE_STEPS", "2.5"),
    ("ADRUN_SHARD_DATA", "yes"),
    ("ADRUN_MAX_STEPS", "0"),
    ("ADRUN_INIT_TIMEOUT", "soon"),
    ("ADRUN_OP_TIMEOUT", "-1"),
    ("ADRUN_ALLOW_UNTESTED_VERSIONS", "yes"),
])
def test_a_bad_value_is_refused_with_the_variables_name(name, value):
    with pytest.raises(UserError, match=f"^{name}='{re.escape(value)}': expected "):
        TaskContext.from_env({**EVERY_VARIABLE, name: value})


def test_a_process_adrun_did_not_start_has_no_context():
    with pytest.raises(UserError, match=f"{MODE_VAR} is not set"):
        TaskContext.from_env({k: v for k, v in EVERY_VARIABLE.items() if k != MODE_VAR})


@pytest.mark.parametrize("task", [Task("worker", 1, "localhost", 2001), Task("ps", 0, "localhost", 2002)])
def test_what_the_launcher_writes_the_runtime_reads_back(task):
    """Both ends use the names of adrun.env_vars: a task's context is the launch's facts."""
    settings = Settings(shard_data=True, max_steps=7, op_timeout_s=0.0)
    launcher = {"ADRUN_INIT_TIMEOUT": "1", "ADRUN_MODE": "capture", "HOME": "/root"}  # neither reaches the task
    env = task_env(task, "job-7", 2, CLUSTER, "run", "/s.yml", "/hook", launcher, restart_count=2, settings=settings)
    assert TaskContext.from_env(env) == TaskContext(
        mode="run", role=task.role, task_index=task.index, num_workers=2, job_id="job-7", cluster=CLUSTER,
        strategy_file="/s.yml", capture_out=None, settings=settings,
    )
    # The two the runtime leaves to the script: its worker index and which attempt this is.
    assert env.get(WORKER_INDEX_VAR) == (str(task.index) if task.role == "worker" else None)
    assert env[RESTART_COUNT_VAR] == "2"


def test_the_hook_checks_the_contracts_mode_variable():
    """The hook reads ADRUN_MODE by its literal name (importing the names would load adrun into
    processes where it stays inert); it must be the contract's."""
    hook = Path(adrun.runtime.context.__file__).parents[1] / "hook" / "sitecustomize.py"
    assert f'os.environ.get("{MODE_VAR}")' in hook.read_text()
