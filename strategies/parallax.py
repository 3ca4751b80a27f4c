"""Parallax: dense gradients by all-reduce, sparse gradients on parameter servers."""

from __future__ import annotations

from pydantic import Field

from adrun.errors import UserError
from adrun.graph_item import VariableInfo
from adrun.spec import ClusterSpec

from .allreduce import AllReduceOptions
from .base import Decision, PerVariableBuilder
from .document import AllReduceSync
from .ps import SyncOptions, least_loaded_assignment, ps_sync


class ParallaxOptions(SyncOptions, AllReduceOptions):
    chunk_size: int = Field(
        default=128, ge=1, description="dense variables per all-reduce group, in creation order"
    )


class Parallax(PerVariableBuilder):
    """Dense-gradient variables by all-reduce, sparse-gradient variables (embeddings) on PS processes.

    Dense variables are grouped `chunk_size` per collective, counting dense variables only, in
    creation order, and get the `compressor`. Sparse variables are placed like PSLoadBalancing:
    largest first on the PS with the fewest bytes of sparse variables so far (ties -> lowest task).
    A sparse update touches a few rows, which a PS applies in place, while all-reduce would
    all-gather every worker's rows to every worker; dense gradients are reduced evenly over all
    workers instead of converging on the PS processes.

    Options: `chunk_size` (default 128), `compressor` (default none; fp16, fp16-ef, powersgd; dense
    only), `powersgd_rank` (default 1), `sync` (default true) and `staleness` (default 0, needs sync)
    for the sparse variables on PS. Choose it for models with large embeddings plus dense layers
    (recommendation, NLP). A model with sparse gradients needs at least one PS process; without
    sparse variables it equals AllReduce.
    """

    Options = ParallaxOptions
    options: ParallaxOptions

    def plan(self, variables: list[VariableInfo], spec: ClusterSpec) -> list[Decision]:
        o = self.options
        sparse = [i for i, v in enumerate(variables) if v.grad == "sparse"]
        if sparse and spec.num_ps < 1:
            names = ", ".join(variables[i].name for i in sparse[:3]) + (", ..." if len(sparse) > 3 else "")
            raise UserError(
                f"strategy Parallax puts sparse-gradient variables ({names}) on parameter servers, but the "
                "cluster spec has no PS process; use --strategy AllReduce, or add `ps: 1` to a node of the spec"
            )
        tasks, _ = least_loaded_assignment([variables[i].nbytes for i in sparse], max(spec.num_ps, 1))
        task_of = dict(zip(sparse, tasks, strict=True))
        decisions, dense_index = [], 0
        for i in range(len(variables)):
            if i in task_of:
                decisions.append(Decision(sync=ps_sync(o, task_of[i])))
            else:
                group = dense_index // o.chunk_size
                dense_index += 1
                decisions.append(
                    Decision(sync=AllReduceSync(group=group, compressor=o.compressor, powersgd_rank=o.powersgd_rank))
                )
        return decisions
