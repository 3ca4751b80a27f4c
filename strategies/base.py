"""What every strategy builder shares: typed options from CLI strings, the facts it needs, and
PlanningFacts -> Strategy.

Building is pure: a builder reads the facts it was given (strategies/planning_facts.py), never a
connection, the records or the terminal. Most builders decide per planned variable, one
synchronizer or a partition (`PerVariableBuilder.plan`), optionally with a note; `build` wraps those
decisions into a Strategy document tied to the graph's fingerprint and the cluster's size. Auto
(strategies/auto.py) searches whole plans with the cost model instead.
"""

from __future__ import annotations

import types
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict

from adrun.errors import UserError
from adrun.graph_item import GradKind, VariableInfo
from adrun.model_io import validate
from adrun.placement import replica_devices
from adrun.spec import ClusterSpec

from .document import AllReduceSync, Partition, PSSync, Strategy, VariablePlan
from .planning_facts import Fact, PlanningFacts

Sync = PSSync | AllReduceSync


@dataclass(frozen=True)
class Decision:
    """What a builder decided for one variable: exactly one of `sync` or `partition`, and a `note`
    when it could not do what was asked (e.g. "kept whole: read inside tf.while_loop")."""

    sync: Sync | None = None
    partition: Partition | None = None
    note: str | None = None


def blocker_note(var: VariableInfo) -> str | None:
    """The plan's note for a variable the runtime cannot split (capture's `partition_blocker`)."""
    return f"kept whole: {var.partition_blocker}" if var.partition_blocker is not None else None


def axis0_rows(var: VariableInfo) -> tuple[int, str | None]:
    """What a builder may cut `var` into on axis 0, as every partitioning builder and Auto decide
    it: (its rows, None) when the runtime can split it; otherwise (1, the plan's note on why it
    stays whole), with no note for a variable of fewer than two rows (nothing to cut)."""
    rows = var.shape[0] if var.shape else 1
    if rows == -1:
        return 1, "kept whole: the size of axis 0 is unknown"
    if rows < 2:
        return 1, None
    if var.partition_blocker is not None:
        return 1, blocker_note(var)
    return rows, None


def planned_grad(var: VariableInfo) -> GradKind:
    """`var`'s gradient kind in its plan. Builders plan only `GraphItem.trainable_with_grads()`,
    which all have one; a plan cannot say "no gradient"."""
    if var.grad is None:
        raise ValueError(f"variable {var.name} has no gradient: only trainable_with_grads() are planned")
    return var.grad


def join_notes(*notes: str | None) -> str | None:
    """The given notes that are set, joined by "; ", or None."""
    return "; ".join(n for n in notes if n) or None


class BuilderOptions(BaseModel):
    """Typed options of one builder. Values typed on the command line arrive as strings
    ("128", "false"); pydantic converts them to the declared types."""

    model_config = ConfigDict(extra="forbid")


class StrategyBuilder(ABC):
    """Turns PlanningFacts into a Strategy. Subclasses set `Options`, `needs` when they read more
    than the graph and the spec, and `build`."""

    Options: ClassVar[type[BuilderOptions]] = BuilderOptions
    needs: ClassVar[frozenset[Fact]] = frozenset()  # the facts `build` reads beyond the graph and the spec

    def __init__(self, options: BuilderOptions | None = None) -> None:
        self.options = options if options is not None else self.Options()

    @classmethod
    def from_cli(cls, options: Mapping[str, str]) -> StrategyBuilder:
        """A builder configured from `--option name=value` pairs; unknown or invalid ones -> UserError."""
        unknown = [name for name in options if name not in cls.Options.model_fields]
        if unknown:
            raise UserError(
                f"unknown option {', '.join(repr(n) for n in unknown)} for strategy builder {cls.__name__}; "
                f"its options: {cls.describe_options()}"
            )
        return cls(validate(cls.Options, dict(options), f"{cls.__name__} options"))

    @classmethod
    def describe_options(cls) -> str:
        """`name (type, default value): description` for each option, or `none`."""
        return "; ".join(
            f"{name} ({_type_name(field.annotation)}, default {_default_text(field.default)}): {field.description}"
            for name, field in cls.Options.model_fields.items()
        ) or "none"

    @abstractmethod
    def build(self, facts: PlanningFacts) -> Strategy:
        """The plan of `facts.graph` on `facts.spec`; ValueError when a fact of `needs` is missing."""

    def check_facts(self, facts: PlanningFacts) -> None:
        """ValueError naming the facts of `needs` that `facts` lacks (a caller's mistake, not the user's)."""
        missing = facts.missing(self.needs)
        if missing:
            raise ValueError(f"{type(self).__name__} plans from {', '.join(f.value for f in missing)} too: "
                             "gather them into the PlanningFacts first")

    def document(self, facts: PlanningFacts, variables: Sequence[VariablePlan]) -> Strategy:
        """The Strategy of `variables`, made by this builder with its options, for `facts`' graph and cluster."""
        return validate(Strategy, dict(
            version=1,
            kind=facts.graph.kind,
            keras=facts.graph.keras,
            builder=type(self).__name__,
            # Unset options (None = "derive from the spec") are left out: the document holds only
            # what was asked; what was derived is visible in the variables.
            options=self.options.model_dump(exclude_none=True),
            fingerprint=facts.graph.fingerprint,
            num_workers=facts.spec.num_workers,
            num_ps=facts.spec.num_ps,
            variables=list(variables),
            replica_devices=replica_devices(facts.spec),
        ), f"{type(self).__name__}'s plan")


class PerVariableBuilder(StrategyBuilder):
    """A builder that decides each variable on its own from the graph and the spec (`plan`)."""

    def build(self, facts: PlanningFacts) -> Strategy:
        """Plan every variable that has a gradient; the rest are left to the runtime's defaults."""
        variables = facts.graph.trainable_with_grads()
        decisions = [
            d if isinstance(d, Decision) else Decision(sync=d) for d in self.plan(variables, facts.spec)
        ]
        return self.document(facts, [
            VariablePlan(name=v.name, shape=v.shape, dtype=v.dtype, grad=planned_grad(v),
                         sync=d.sync, partition=d.partition, note=d.note)
            for v, d in zip(variables, decisions, strict=True)
        ])

    @abstractmethod
    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> Sequence[Sync | Decision]:
        """One synchronizer or Decision per variable, in the order given (creation order)."""


def _type_name(annotation: Any) -> str:
    """`int`, `int or unset`, `one of none|fp16`: an option's type as a user types it."""
    origin = get_origin(annotation)
    if origin is Literal:
        return "one of " + "|".join(str(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        unset = " or unset" if len(args) < len(get_args(annotation)) else ""
        return " or ".join(_type_name(a) for a in args) + unset
    return getattr(annotation, "__name__", str(annotation))


def _default_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
