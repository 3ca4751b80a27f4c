"""This process's `TaskContext` (adrun/task_context.py), read once from adrun's env contract.

The only place the runtime reads the contract: everything else asks `current()`."""

from __future__ import annotations

from adrun.task_context import TaskContext

_current: TaskContext | None = None


def current() -> TaskContext:
    """Who this process is, parsed from its environment on first use (a bad value is refused
    there, by its variable's name)."""
    global _current
    if _current is None:
        _current = TaskContext.from_env()
    return _current
