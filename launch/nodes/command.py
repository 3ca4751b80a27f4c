"""How adrun runs a program of its own on a node, and where and with which Python the node works.

One rule for every program adrun sends to a node: cluster check's probe and the network facts'
transfers (`probe.py`), a job's keepers and helpers (`adrun.launch.job.remote_agent`). They run
as the node's tasks will, so a probe that works says the tasks' interpreter and environment work:

    cd WORKDIR && ACTIVATE && exec env VARS PYTHON -u -c SOURCE MODE [ARGS_JSON]

`cd` comes first, so a missing workdir fails right there, by name; `ssh.activate` only over SSH
(it sets up a login on the node, and the launcher on this machine already runs in its own
environment); VARS are the node's `env` and what the caller adds; `exec` makes the program the
shell's own process (a local timeout or a closed SSH session ends the program itself). Every
value is shell-quoted.

The program's source travels on the command line (`shipped_source`), with `node_tools.py` and
`fence.py`: the standard-library helpers it shares with the launcher, so nothing needs to be
installed first.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from adrun.spec import Node

from . import fence, node_tools

# The node programs import `node_tools` relatively (`from . import node_tools` in nodes/,
# `from ..nodes import node_tools` in job/), so the bootstrap mirrors launch/'s folders under a
# package of its own; not `adrun`, which the node may have in another version, or not at all.
_SHIPPED_ROOT = "_adrun_shipped"
_BOOTSTRAP = """\
import sys, types
for name in ({root!r}, {root!r} + ".nodes", {root!r} + ".job"):
    sys.modules[name] = types.ModuleType(name)
    sys.modules[name].__path__ = []
for name, source in {carried!r}:
    module = types.ModuleType({root!r} + ".nodes." + name)
    sys.modules[module.__name__] = module
    setattr(sys.modules[{root!r} + ".nodes"], name, module)
    exec(compile(source, name + ".py", "exec"), module.__dict__)
exec(compile({program!r}, {name!r}, "exec"), {{"__name__": "__main__", "__package__": {package!r}}})
"""
_CARRIED = (node_tools, fence)  # standard-library modules of nodes/ the programs import


def node_python(node: Node) -> str:
    """The interpreter the node's tasks, probes and keepers run with: `python`, else the launcher's."""
    return node.python or sys.executable


def node_workdir(node: Node, *, local: bool, cwd: str | Path | None = None) -> str:
    """Where the node's tasks run: on this machine the launcher's directory (`cwd`, default the
    current one); on another node `ssh.workdir`, else the same path as here."""
    if not local and node.ssh is not None and node.ssh.workdir:
        return node.ssh.workdir
    return str(Path(cwd) if cwd is not None else Path.cwd())


def shipped_source(program: ModuleType) -> str:
    """Python source that runs `program` (`probe` or `remote_agent`) as `__main__` with
    `python -c`, its imports of `node_tools` and `fence` served from the sources carried along."""
    assert program.__file__ is not None and program.__package__ is not None
    folder = program.__package__.rsplit(".", 1)[-1]  # "nodes" or "job"
    carried = tuple((module.__name__.rsplit(".", 1)[-1], Path(str(module.__file__)).read_text()) for module in _CARRIED)
    return _BOOTSTRAP.format(root=_SHIPPED_ROOT, carried=carried, program=Path(program.__file__).read_text(),
                             name=Path(program.__file__).name, package=f"{_SHIPPED_ROOT}.{folder}")


def node_command(node: Node, source: str, mode: str, args: Mapping[str, Any] | None = None, *, local: bool,
                 workdir: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The shell command running `source` (from `shipped_source`) in `mode` on `node`, as the
    module docstring describes; `env` is added to the node's `env`."""
    steps = []
    if workdir is not None:
        steps.append(f"cd {shlex.quote(workdir)}")
    if not local and node.ssh is not None and node.ssh.activate:
        steps.append(node.ssh.activate)
    variables = " ".join(f"{key}={shlex.quote(value)}" for key, value in {**node.env, **(env or {})}.items())
    prefix = f"env {variables} " if variables else ""
    payload = f" {shlex.quote(json.dumps(dict(args)))}" if args is not None else ""
    steps.append(f"exec {prefix}{shlex.quote(node_python(node))} -u -c {shlex.quote(source)} {mode}{payload}")
    return " && ".join(steps)
