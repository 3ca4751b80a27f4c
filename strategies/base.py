"""What every strategy builder shares: typed options from CLI strings, and GraphItem -> Strategy.

A builder only decides one synchronizer per planned variable (`plan`); `build` wraps those decisions
into a Strategy document tied to the graph's fingerprint and the cluster's size.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from adrun.errors import UserError
from adrun.graph_item import GraphItem, VariableInfo
from adrun.model_io import validate
from adrun.spec import ClusterSpec

from .document import AllReduceSync, PSSync, Strategy, VariablePlan


class BuilderOptions(BaseModel):
    """Typed options of one builder. Values typed on the command line arrive as strings
    ("128", "false"); pydantic converts them to the declared types."""

    model_config = ConfigDict(extra="forbid")


class StrategyBuilder(ABC):
    """Turns a GraphItem and a ClusterSpec into a Strategy. Subclasses set `Options` and `plan`."""

    Options: ClassVar[type[BuilderOptions]] = BuilderOptions

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
            f"{name} ({getattr(field.annotation, '__name__', field.annotation)}, default {field.default}): "
            f"{field.description}"
            for name, field in cls.Options.model_fields.items()
        ) or "none"

    def build(self, graph_item: GraphItem, spec: ClusterSpec) -> Strategy:
        """Plan every variable that has a gradient; the rest are left to the runtime's defaults."""
        variables = graph_item.trainable_with_grads()
        synchronizers = self.plan(variables, spec)
        return Strategy(
            version=1,
            builder=type(self).__name__,
            options=self.options.model_dump(),
            fingerprint=graph_item.fingerprint,
            num_workers=spec.num_workers,
            num_ps=spec.num_ps,
            variables=[
                VariablePlan(name=v.name, shape=v.shape, dtype=v.dtype, grad=v.grad, sync=sync)
                for v, sync in zip(variables, synchronizers, strict=True)
            ],
        )

    @abstractmethod
    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[PSSync | AllReduceSync]:
        """One synchronizer per variable, in the order given (creation order)."""
