"""What to start for a job: one command line, environment and directory per task, and the machine
it starts on.

Kept apart from supervision so the supervisor can run any list of commands (tests run plain
`python -c` tasks); every task is planned alike, what differs by machine (ports, environment,
directory) its node's backend answers (`backends`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from adrun.env_vars import Settings
from adrun.spec import ClusterSpec

from ..env import gpu_visibility, run_context
from ..nodes.command import node_python
from .backends import LOCAL_MACHINE, JobNodes, NodeBackend
from .local import ps_argv, worker_argv
from .tasks import Task, cluster_def, placed_tasks


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one task. On another machine, `env` holds only the variables
    set on top of that node's own environment and `cwd` is a path there."""

    task: Task
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    node: NodeBackend = field(default=LOCAL_MACHINE, compare=False)  # the machine it starts on


def plan_job(
    spec: ClusterSpec,
    script: str | Path,
    script_args: Sequence[str],
    *,
    job_id: str,
    strategy_file: str | Path,
    nodes: JobNodes | None = None,
    cwd: str | Path | None = None,
    base_env: Mapping[str, str] | None = None,
    restart_count: int = 0,
    settings: Settings | None = None,
) -> list[TaskLaunch]:
    """Launches for every task of `spec` in run mode, for attempt `restart_count` of the job,
    each told the job's `settings` (None: those the launcher's environment `base_env` sets).

    `nodes` are the job's machines (None: this machine's alone, refusing a node that is not);
    their ports are this attempt's (`JobNodes.ports`: on another node, those its `prepare` chose).
    """
    nodes = nodes if nodes is not None else JobNodes(spec)
    backend_of = {id(node): backend for node, backend in zip(spec.nodes, nodes.of_node, strict=True)}
    placed = [(replace(task, remote=backend_of[id(node)].remote), node, backend_of[id(node)])
              for task, node in placed_tasks(spec, nodes.ports())]
    tasks = [task for task, _, _ in placed]
    cluster = cluster_def(tasks)
    num_workers = sum(t.role == "worker" for t in tasks)
    launcher_env = os.environ if base_env is None else base_env
    if settings is None:
        settings = Settings.from_env(launcher_env)
    launches = []
    on_node: dict[tuple[int, str], int] = {}  # (node, role) -> tasks of that role placed so far
    for task, node, backend in placed:
        index_on_node = on_node.get((id(node), task.role), 0)
        on_node[(id(node), task.role)] = index_on_node + 1
        # the node's own env wins, e.g. a CUDA_VISIBLE_DEVICES the user chose
        node_env = {**gpu_visibility(task.role, index_on_node, node.gpus, node.replicas_per_worker), **node.env}
        python = node_python(node)
        argv = worker_argv(python, script, script_args) if task.role == "worker" else ps_argv(python)
        context = run_context(task, job_id, num_workers, cluster, strategy_file=strategy_file,
                              restart_count=restart_count, settings=settings)
        env = backend.task_env(context, launcher_env, node, node_env)
        launches.append(TaskLaunch(task, argv, env, backend.workdir(node, cwd), backend))
    return launches
