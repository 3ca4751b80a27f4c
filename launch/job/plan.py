"""What to start for a job: one command line, environment and directory per task.

Kept apart from supervision so the supervisor can run any list of commands (tests run plain
`python -c` tasks); local and remote tasks are planned alike, only their environment differs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import adrun
from adrun.env_vars import Settings
from adrun.errors import UserError
from adrun.spec import ClusterSpec

from ..env import gpu_visibility, remote_task_env, run_context, task_env
from ..nodes.command import node_python, node_workdir
from ..nodes.hosts import is_local_host
from .local import ps_argv, worker_argv
from .ports import allocate_ports
from .tasks import Task, cluster_def, placed_tasks

HOOK_DIR = Path(adrun.__file__).resolve().parent / "hook"


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one task. For a remote task (`task.remote`), `env` holds only
    the variables set on top of the node's own environment and `cwd` is a path on that node."""

    task: Task
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def plan_job(
    spec: ClusterSpec,
    script: str | Path,
    script_args: Sequence[str],
    *,
    job_id: str,
    strategy_file: str | Path,
    remote_ports: Mapping[str, Sequence[int]] | None = None,
    cwd: str | Path | None = None,
    hook_dir: str | Path = HOOK_DIR,
    base_env: Mapping[str, str] | None = None,
    restart_count: int = 0,
    settings: Settings | None = None,
) -> list[TaskLaunch]:
    """Launches for every task of `spec` in run mode, for attempt `restart_count` of the job,
    each told the job's `settings` (None: those the launcher's environment `base_env` sets).

    Ports of this machine's nodes are reserved here; `remote_ports[address]` holds those a
    remote node's probe chose (`adrun.launch.job.provision`). A remote node without them is refused:
    its tasks could only be started blind.
    """
    here = [is_local_host(node.address) for node in spec.nodes]
    ports = allocate_ports(spec, here)
    for pos, node in enumerate(spec.nodes):
        if not here[pos]:
            if remote_ports is None or node.address not in remote_ports:
                raise UserError(f"node {node.address} is not this machine and no SSH connection to it is open")
            ports[pos] = list(remote_ports[node.address])
    remote_hosts = {node.address for pos, node in enumerate(spec.nodes) if not here[pos]}
    placed = [(replace(task, remote=task.host in remote_hosts), node) for task, node in placed_tasks(spec, ports)]
    tasks = [task for task, _ in placed]
    cluster = cluster_def(tasks)
    num_workers = sum(t.role == "worker" for t in tasks)
    launcher_env = os.environ if base_env is None else base_env
    if settings is None:
        settings = Settings.from_env(launcher_env)
    launches = []
    on_node: dict[tuple[int, str], int] = {}  # (node, role) -> tasks of that role placed so far
    for task, node in placed:
        index_on_node = on_node.get((id(node), task.role), 0)
        on_node[(id(node), task.role)] = index_on_node + 1
        # the node's own env wins, e.g. a CUDA_VISIBLE_DEVICES the user chose
        node_env = {**gpu_visibility(task.role, index_on_node, node.gpus, node.replicas_per_worker), **node.env}
        python = node_python(node)
        argv = worker_argv(python, script, script_args) if task.role == "worker" else ps_argv(python)
        workdir = Path(node_workdir(node, local=not task.remote, cwd=cwd))
        context = run_context(task, job_id, num_workers, cluster, strategy_file=strategy_file,
                              restart_count=restart_count, settings=settings)
        if task.remote:
            env = remote_task_env(context, launcher_env, node.ssh.forward_env if node.ssh is not None else [],
                                  node_env)
        else:
            env = task_env(context, launcher_env, hook_dir=str(hook_dir), node_env=node_env)
        launches.append(TaskLaunch(task, argv, env, workdir))
    return launches
