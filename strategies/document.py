"""Strategy document v1: how each variable's gradients are synchronized (YAML).

The planner writes it, a user may read or edit it, and every worker loads it to rewrite its graph.
It is tied to one graph (`fingerprint`) and one cluster size (`num_workers`, `num_ps`);
`check_matches` refuses a document used with a different graph or spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from adrun.errors import UserError
from adrun.graph_item import DType, GradKind, GraphItem, Shape
from adrun.model_io import Loc, Problems, dump_yaml, load_yaml_model
from adrun.spec import ClusterSpec


class PSSync(BaseModel):
    """Gradients are sent to one parameter server, which holds the variable and applies updates."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ps"] = "ps"
    ps_task: int = Field(ge=0)  # index of the PS process that holds the variable
    sync: bool = True  # false = every worker's update is applied on arrival (asynchronous)
    staleness: int = Field(default=0, ge=0)  # bounded staleness in steps (needs sync: true)
    local_proxy: bool = False  # each worker reads a cached local copy

    @model_validator(mode="after")
    def _staleness_needs_sync(self) -> PSSync:
        if self.staleness > 0 and not self.sync:
            raise Problems(
                [(("staleness",), f"a bound of {self.staleness} step(s) needs `sync: true`; "
                  "asynchronous updates have no bound")]
            )
        return self


class AllReduceSync(BaseModel):
    """Every worker keeps a replica; gradients are averaged with a collective all-reduce."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["allreduce"] = "allreduce"
    group: int = Field(ge=0)  # variables of one group are reduced together in one collective
    compressor: Literal["none"] = "none"


Synchronizer = Annotated[PSSync | AllReduceSync, Field(discriminator="kind")]


class VariablePlan(BaseModel):
    """The plan for one variable; name, shape and dtype repeat the GraphItem so the file is readable."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    shape: Shape
    dtype: DType
    grad: GradKind
    sync: Synchronizer


class Strategy(BaseModel):
    """A whole plan: which builder made it, for which graph and cluster size, and every variable's sync."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    builder: str = Field(min_length=1)
    options: dict[str, bool | int | float | str] = {}
    fingerprint: str = Field(min_length=1)
    num_workers: int = Field(ge=1)
    num_ps: int = Field(ge=0)
    variables: list[VariablePlan]

    @model_validator(mode="after")
    def _check_variables(self) -> Strategy:
        findings: list[tuple[Loc, str]] = []
        first_seen: dict[str, int] = {}
        for i, var in enumerate(self.variables):
            if var.name in first_seen:
                findings.append(
                    (("variables", i, "name"), f"duplicate variable '{var.name}' (also variables[{first_seen[var.name]}])")
                )
            first_seen.setdefault(var.name, i)
            if isinstance(var.sync, PSSync):
                findings += self._ps_task_findings(i, var.sync)
        if findings:
            raise Problems(findings)
        return self

    def _ps_task_findings(self, index: int, sync: PSSync) -> list[tuple[Loc, str]]:
        if self.num_ps == 0:
            return [(("variables", index, "sync"), "a 'ps' synchronizer needs a PS process, but num_ps is 0")]
        if sync.ps_task >= self.num_ps:
            return [
                (("variables", index, "sync", "ps_task"),
                 f"PS task {sync.ps_task} does not exist; num_ps is {self.num_ps} (tasks 0..{self.num_ps - 1})")
            ]
        return []


def strategy_to_yaml(strategy: Strategy) -> str:
    """The document as readable YAML, fields in schema order, shapes and synchronizers on one line."""
    header = (
        f"# adrun strategy, made by {strategy.builder}. The fingerprint ties it to one graph:\n"
        "# edit synchronizers freely, but keep names, shapes and dtypes as captured.\n"
    )
    return header + dump_yaml(strategy.model_dump(mode="json"))


def dump_strategy(strategy: Strategy, path: str | Path) -> None:
    Path(path).write_text(strategy_to_yaml(strategy), encoding="utf-8")


def load_strategy(path: str | Path) -> Strategy:
    """Read and validate a strategy document; every problem is reported in one `UserError`."""
    return load_yaml_model(path, Strategy)


def check_matches(strategy: Strategy, graph_item: GraphItem, spec: ClusterSpec, source: str = "strategy") -> None:
    """Refuse a plan made for another graph or another cluster size, saying what differs.

    `source` names the plan in the message (usually its file path).
    """
    problems = []
    if strategy.fingerprint != graph_item.fingerprint:
        problems.append(
            f"planned for a different graph (fingerprint {strategy.fingerprint}, this graph "
            f"{graph_item.fingerprint}): {describe_variable_changes(strategy, graph_item)}"
        )
    if (strategy.num_workers, strategy.num_ps) != (spec.num_workers, spec.num_ps):
        problems.append(
            f"planned for {strategy.num_workers} worker(s) and {strategy.num_ps} PS, but the cluster spec "
            f"has {spec.num_workers} worker(s) and {spec.num_ps} PS"
        )
    if problems:
        advice = f"plan again (--strategy {strategy.builder}) for this script and cluster"
        raise UserError("\n".join(f"{source}: {p}" for p in problems) + f"\n{source}: {advice}")


def describe_variable_changes(strategy: Strategy, graph_item: GraphItem) -> str:
    """Which planned variables are missing, new or changed in `graph_item`, in one sentence."""
    planned = {v.name: v for v in strategy.variables}
    found = {v.name: v for v in graph_item.trainable_with_grads()}
    parts = []
    missing = [name for name in planned if name not in found]
    extra = [name for name in found if name not in planned]
    if missing:
        parts.append("not in the graph (or no longer trained): " + ", ".join(missing))
    if extra:
        parts.append("trained but not planned: " + ", ".join(extra))
    for name in (n for n in planned if n in found):
        was, now = planned[name], found[name]
        changes = [
            f"{field} {old} -> {new}"
            for field, old, new in (
                ("shape", was.shape, now.shape),
                ("dtype", was.dtype, now.dtype),
                ("grad", was.grad, now.grad),
            )
            if old != new
        ]
        if changes:
            parts.append(f"'{name}' changed: {', '.join(changes)}")
    return "; ".join(parts) or (
        "the planned variables are unchanged; variables the plan does not cover "
        "(non-trainable, or without gradient) differ"
    )
