"""Doing one thing on many nodes at once: a job's nodes are prepared, sampled and swept, and the
network facts' nodes asked and measured, in parallel, so a slow or silent node costs its own
timeout once, not once per node before it. In nodes/, so that both nodes/ and job/ use it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
MAX_WORKERS = 32  # threads at once, however many items


def each(items: Iterable[T], fn: Callable[[T], R]) -> list[R]:
    """`fn` over `items` in parallel; the first error (in item order) is raised after all ran."""
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(len(items), MAX_WORKERS)) as pool:
        futures = [pool.submit(fn, item) for item in items]
    return [f.result() for f in futures]
