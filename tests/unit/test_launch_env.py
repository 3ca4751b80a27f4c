"""The env contract every task gets (docs/architecture.md)."""

from __future__ import annotations

import json
import os
import re

import pytest

from adrun.errors import UserError
from adrun.launch.env import MAX_STEPS_VAR, gpu_visibility, max_steps, remote_task_env, task_env
from adrun.launch.job.tasks import Task

pytestmark = pytest.mark.timeout(10)

CLUSTER = {"ps": ["localhost:2002"], "worker": ["localhost:2000", "localhost:2001"]}


def _env(task: Task, base_env: dict[str, str], node_env: dict[str, str] | None = None) -> dict[str, str]:
    return task_env(task, "job-7", 2, CLUSTER, "run", "/runs/job-7/strategy.yml", "/adrun/hook", base_env, node_env)


def test_worker_gets_the_contract():
    env = _env(Task("worker", 1, "localhost", 2001), {"HOME": "/root"})

    assert env["ADRUN_WORKER_INDEX"] == "1"
    assert env["ADRUN_TASK_INDEX"] == "1"
    assert env["ADRUN_ROLE"] == "worker"
    assert env["ADRUN_NUM_WORKERS"] == "2"
    assert env["ADRUN_JOB_ID"] == "job-7"
    assert env["ADRUN_MODE"] == "run"
    assert env["ADRUN_STRATEGY_FILE"] == "/runs/job-7/strategy.yml"
    assert json.loads(env["ADRUN_CLUSTER"]) == CLUSTER
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["HOME"] == "/root"


def test_ps_has_no_worker_index_even_if_the_launcher_had_one():
    stale = {"ADRUN_WORKER_INDEX": "5", "ADRUN_JOB_ID": "other-job", "ADRUN_INIT_TIMEOUT": "30"}
    env = _env(Task("ps", 0, "localhost", 2002), stale)

    assert "ADRUN_WORKER_INDEX" not in env
    assert env["ADRUN_ROLE"] == "ps"
    assert env["ADRUN_TASK_INDEX"] == "0"
    assert env["ADRUN_JOB_ID"] == "job-7"
    assert env["ADRUN_INIT_TIMEOUT"] == "30"  # a setting, not part of the contract: passes through


def test_hook_dir_comes_first_on_pythonpath():
    task = Task("worker", 0, "localhost", 2000)
    assert _env(task, {})["PYTHONPATH"] == "/adrun/hook"
    assert _env(task, {"PYTHONPATH": f"/a{os.pathsep}/b"})["PYTHONPATH"] == os.pathsep.join(["/adrun/hook", "/a", "/b"])


def test_node_env_is_merged_but_cannot_override_the_contract():
    node_env = {"PYTHONPATH": "/node", "OMP_NUM_THREADS": 2, "ADRUN_ROLE": "ps"}
    env = _env(Task("worker", 0, "localhost", 2000), {"PYTHONPATH": "/launcher"}, node_env)

    assert env["PYTHONPATH"] == os.pathsep.join(["/adrun/hook", "/node"])
    assert env["OMP_NUM_THREADS"] == "2"
    assert env["ADRUN_ROLE"] == "worker"


def test_no_strategy_file_variable_when_none_is_given():
    base_env = {"ADRUN_STRATEGY_FILE": "/old"}
    env = task_env(Task("worker", 0, "h", 1), "j", 1, {"worker": ["h:1"]}, "run", None, "/hook", base_env)
    assert "ADRUN_STRATEGY_FILE" not in env


def test_gpu_visibility_gives_each_worker_its_own_gpus_and_hides_them_from_ps():
    assert gpu_visibility("worker", 0, gpus=4, replicas_per_worker=2) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert gpu_visibility("worker", 1, gpus=4, replicas_per_worker=2) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert gpu_visibility("ps", 0, gpus=4, replicas_per_worker=2) == {"CUDA_VISIBLE_DEVICES": ""}
    assert gpu_visibility("worker", 0, gpus=0, replicas_per_worker=3) == {}


@pytest.mark.parametrize("value,steps", [("5", 5), (" 12 ", 12), ("", None)])
def test_max_steps_setting(value, steps):
    assert max_steps({MAX_STEPS_VAR: value}) == steps
    assert max_steps({}) is None


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "five", "1e3", "+"])
def test_max_steps_refuses_what_is_no_step_count(value):
    with pytest.raises(UserError, match=f"ADRUN_MAX_STEPS='{re.escape(value)}': expected a whole number of training steps"):
        max_steps({MAX_STEPS_VAR: value})
def test_the_attempt_number_is_in_the_contract_and_never_inherited():
    base_env = {"ADRUN_RESTART_COUNT": "7"}  # a launcher started from inside another job's attempt 7
    assert _env(Task("worker", 0, "localhost", 2000), base_env)["ADRUN_RESTART_COUNT"] == "0"
    env = task_env(Task("ps", 0, "localhost", 2002), "job-7", 2, CLUSTER, "run", None, "/hook", base_env,
                   restart_count=2)
    assert env["ADRUN_RESTART_COUNT"] == "2"
    remote = remote_task_env(Task("worker", 1, "10.0.0.2", 2001, remote=True), "job-7", 2, CLUSTER, "/s.yml",
                             base_env, [], restart_count=3)
    assert remote["ADRUN_RESTART_COUNT"] == "3"
