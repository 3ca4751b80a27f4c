"""The env contract every task gets (docs/architecture.md)."""

from __future__ import annotations

import json
import os
import re

import pytest

from adrun.errors import UserError
from adrun.defaults import TASK_TIMEOUT_S
from adrun.env_vars import SETTING_VARS, Settings
from adrun.launch.env import gpu_visibility, job_settings, remote_task_env, run_context, task_env
from adrun.launch.job.plan import plan_job
from adrun.launch.job.tasks import Task
from adrun.spec import ClusterSpec
from adrun.task_context import Mode, Role, TaskContext

pytestmark = pytest.mark.timeout(10)

CLUSTER = {"ps": ["localhost:2002"], "worker": ["localhost:2000", "localhost:2001"]}


def _context(task: Task, strategy_file: str | None = "/runs/job-7/strategy.yml", **facts: object) -> TaskContext:
    return run_context(task, "job-7", 2, CLUSTER, strategy_file=strategy_file, **facts)


def _env(task: Task, base_env: dict[str, str], node_env: dict[str, str] | None = None) -> dict[str, str]:
    return task_env(_context(task), base_env, hook_dir="/adrun/hook", node_env=node_env)


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
    # a setting is the job's, in the context (plan_job reads the launcher's), never copied from base_env
    assert "ADRUN_INIT_TIMEOUT" not in env


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
    env = task_env(run_context(Task("worker", 0, "h", 1), "j", 1, {"worker": ["h:1"]}, strategy_file=None), base_env,
                   hook_dir="/hook")
    assert "ADRUN_STRATEGY_FILE" not in env


def test_gpu_visibility_gives_each_worker_its_own_gpus_and_hides_them_from_ps():
    assert gpu_visibility("worker", 0, gpus=4, replicas_per_worker=2) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert gpu_visibility("worker", 1, gpus=4, replicas_per_worker=2) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert gpu_visibility("ps", 0, gpus=4, replicas_per_worker=2) == {"CUDA_VISIBLE_DEVICES": ""}
    assert gpu_visibility("worker", 0, gpus=0, replicas_per_worker=3) == {}


@pytest.mark.parametrize("env,settings", [
    ({}, Settings()),
    ({"ADRUN_MAX_STEPS": "5"}, Settings(max_steps=5)),
    ({"ADRUN_MAX_STEPS": " 12 ", "ADRUN_SHARD_DATA": "1"}, Settings(shard_data=True, max_steps=12)),
    ({"ADRUN_MAX_STEPS": "", "ADRUN_SHARD_DATA": "0"}, Settings()),
    ({"ADRUN_INIT_TIMEOUT": "30", "ADRUN_OP_TIMEOUT": "0.5"}, Settings(init_timeout_s=30.0, op_timeout_s=0.5)),
    ({"ADRUN_OP_TIMEOUT": "0"}, Settings(op_timeout_s=0.0)),
])
def test_settings_are_read_from_the_environment_and_written_back_equal(env, settings):
    assert Settings.from_env(env) == settings
    assert Settings.from_env(settings.to_env()) == settings
    assert set(settings.to_env()) <= set(SETTING_VARS)


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "five", "1e3", "+"])
def test_max_steps_refuses_what_is_no_step_count(value):
    with pytest.raises(UserError, match=f"ADRUN_MAX_STEPS='{re.escape(value)}': expected a whole number of training steps"):
        Settings.from_env({"ADRUN_MAX_STEPS": value})


@pytest.mark.parametrize("name,value,expected", [
    ("ADRUN_SHARD_DATA", "yes", "expected one of 0, 1"),
    ("ADRUN_SHARD_DATA", "true", "expected one of 0, 1"),
    ("ADRUN_INIT_TIMEOUT", "ten", "expected a number of seconds, 0 or more"),
    ("ADRUN_INIT_TIMEOUT", "-1", "expected a number of seconds, 0 or more"),
    ("ADRUN_OP_TIMEOUT", "inf", "expected a number of seconds, 0 or more"),
    ("ADRUN_OP_TIMEOUT", "nan", "expected a number of seconds, 0 or more"),
])
def test_a_setting_that_means_nothing_is_refused_by_name(name, value, expected):
    with pytest.raises(UserError, match=f"^{name}='{re.escape(value)}': {expected}$"):
        Settings.from_env({name: value})


def test_a_jobs_settings_are_the_environments_with_the_command_lines_options_winning():
    launcher = {"ADRUN_MAX_STEPS": "9", "ADRUN_OP_TIMEOUT": "30"}
    assert job_settings(launcher) == Settings(max_steps=9, op_timeout_s=30.0)
    assert job_settings(launcher, shard_data=True, max_steps=3) == Settings(True, 3, TASK_TIMEOUT_S, 30.0)
    assert job_settings({"ADRUN_SHARD_DATA": "1"}, shard_data=False) == Settings(shard_data=True)
    with pytest.raises(UserError, match="ADRUN_MAX_STEPS='ten'"):
        job_settings({"ADRUN_MAX_STEPS": "ten"}, max_steps=3)  # refused even when the option would win


def test_every_task_is_told_the_jobs_settings_and_neither_the_launchers_nor_the_nodes_own():
    launcher = {"ADRUN_MAX_STEPS": "9", "ADRUN_SHARD_DATA": "1", "ADRUN_OWN_SCRIPT_FLAG": "x"}
    node_env = {"ADRUN_OP_TIMEOUT": "1"}
    settings = Settings(max_steps=3, init_timeout_s=20.0)
    local = task_env(_context(Task("worker", 0, "localhost", 2000), settings=settings), launcher, hook_dir="/hook",
                     node_env=node_env)
    remote = remote_task_env(_context(Task("worker", 1, "10.0.0.2", 2001, remote=True), settings=settings),
                             launcher, [], node_env)
    for env in (local, remote):
        assert {k: env.get(k) for k in SETTING_VARS} == {
            "ADRUN_SHARD_DATA": None, "ADRUN_MAX_STEPS": "3", "ADRUN_INIT_TIMEOUT": "20", "ADRUN_OP_TIMEOUT": None,
            "ADRUN_ALLOW_UNTESTED_VERSIONS": None}
        assert env["ADRUN_OWN_SCRIPT_FLAG"] == "x"  # an ADRUN_* name adrun does not know passes through


def test_without_settings_a_job_is_told_those_of_the_launchers_environment(tmp_path):
    launcher = {"ADRUN_MAX_STEPS": "9", "ADRUN_SHARD_DATA": "1"}
    spec = ClusterSpec.model_validate({"version": 1, "nodes": [{"address": "localhost", "workers": 1, "ps": 1}]})
    launches = plan_job(spec, "train.py", [], job_id="j", strategy_file=tmp_path / "s.yml", base_env=launcher)
    assert len(launches) == 2
    for launch in launches:
        assert Settings.from_env(launch.env) == Settings(shard_data=True, max_steps=9)


def test_the_hooks_instructions_in_capture_and_profile_mode():
    capture = task_env(TaskContext(mode=Mode.CAPTURE, role=Role.WORKER, task_index=0, num_workers=2, job_id="j",
                                   cluster={}, capture_out="/tmp/found.json"),
                       {"ADRUN_CAPTURE_OUT": "/stale", "ADRUN_PROFILE_STEPS": "9"}, hook_dir="/hook")
    assert capture["ADRUN_CAPTURE_OUT"] == "/tmp/found.json"
    assert "ADRUN_PROFILE_STEPS" not in capture and "ADRUN_SCRATCH_DIR" not in capture
    profile = task_env(TaskContext(mode=Mode.PROFILE, role=Role.WORKER, task_index=0, num_workers=1, job_id="j",
                                   cluster={}, capture_out="/o.json", scratch_dir="/scratch", profile_warmup=1,
                                   profile_steps=20), {}, hook_dir="/hook")
    assert {k: profile[k] for k in ("ADRUN_MODE", "ADRUN_CAPTURE_OUT", "ADRUN_SCRATCH_DIR", "ADRUN_PROFILE_WARMUP",
                                    "ADRUN_PROFILE_STEPS")} == {
        "ADRUN_MODE": "profile", "ADRUN_CAPTURE_OUT": "/o.json", "ADRUN_SCRATCH_DIR": "/scratch",
        "ADRUN_PROFILE_WARMUP": "1", "ADRUN_PROFILE_STEPS": "20"}


def test_the_attempt_number_is_in_the_contract_and_never_inherited():
    base_env = {"ADRUN_RESTART_COUNT": "7"}  # a launcher started from inside another job's attempt 7
    assert _env(Task("worker", 0, "localhost", 2000), base_env)["ADRUN_RESTART_COUNT"] == "0"
    env = task_env(_context(Task("ps", 0, "localhost", 2002), None, restart_count=2), base_env, hook_dir="/hook")
    assert env["ADRUN_RESTART_COUNT"] == "2"
    remote = remote_task_env(_context(Task("worker", 1, "10.0.0.2", 2001, remote=True), restart_count=3),
                             base_env, [])
    assert remote["ADRUN_RESTART_COUNT"] == "3"
