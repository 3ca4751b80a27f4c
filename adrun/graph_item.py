"""GraphItem: what capture found in the user's graph, as JSON.

The capture run (adrun/runtime/capture.py) fills it from the TensorFlow graph; the builders plan from
it without TensorFlow; every worker recomputes its fingerprint to check that it is running the graph
the plan was made for. So this module must not import TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, model_validator

from adrun.model_io import Problems, load_json_model

# TensorFlow dtype names numpy does not know, with their size in bytes. Strings have no fixed size
# and count as 0.
_NON_NUMPY_ITEMSIZE = {
    "bfloat16": 2,
    "qint8": 1,
    "quint8": 1,
    "qint16": 2,
    "quint16": 2,
    "qint32": 4,
    "string": 0,
}


def dtype_itemsize(dtype: str) -> int:
    """Bytes per element of a TensorFlow/numpy dtype name such as `float32`; ValueError if unknown."""
    if dtype in _NON_NUMPY_ITEMSIZE:
        return _NON_NUMPY_ITEMSIZE[dtype]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    # np.dtype also accepts aliases ("f4", "<f8"); only canonical names keep fingerprints stable.
    if np_dtype is None or np_dtype.name != dtype:
        raise ValueError(f"unknown dtype '{dtype}' (expected a name such as float32, int64, bfloat16)")
    return np_dtype.itemsize


def _check_dtype(dtype: str) -> str:
    dtype_itemsize(dtype)
    return dtype


DType = Annotated[str, AfterValidator(_check_dtype)]
# -1 marks a dimension whose size is unknown when the graph is built; a shape of unknown rank is [-1].
Shape = list[Annotated[StrictInt, Field(ge=-1)]]
GradKind = Literal["dense", "sparse"]
# How the script trains, so every task knows which runtime to start at `import tensorflow`:
# `graph` (a tf.compat.v1 Session runs the graph adrun rewrites) or `tf2` (eager TensorFlow, Keras 3
# or tf_keras; adrun synchronizes at the optimizer's apply, adrun/runtime/tf2/).
ScriptKind = Literal["graph", "tf2"]
# Which Keras a TF2 script's optimizer belongs to (the capture reads its module): it changes what
# can run, since tf_keras lists a split variable's shards as its weights (docs/tf2-plans.md), so a
# tf_keras script is never planned a variable split over PS tasks (strategies/document.py).
KerasFlavour = Literal["keras3", "tf_keras"]


class PooledBags(BaseModel):
    """What a variable's embedding lookups read in a step when each is pooled over its bags, as
    `reduce_mean`/`reduce_sum(embedding_lookup(table, ids[B, L]), axis=1)` or
    `embedding_lookup_sparse` with mean, sum or sqrtn: held on PS tasks, each shard would return
    per-example partial sums [examples, dim] and take d_sum [examples, dim] back, not the rows
    (docs/performance.md, "Pooling bags on the PS"; the cost model counts those bytes,
    strategies/wire_bound.py). Capture fills it in by the runtime's matcher
    (runtime/kernels/pooled_lookups.py), the table taken to be on a PS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # rows of the pooled outputs per step and worker, summed over the variable's pooled lookups;
    # None when neither the graph nor the profiling run's feed says (the table is then counted by
    # its rows)
    examples: int | None = Field(default=None, ge=1)
    # ids looked up per step and worker, repeats included (B × L for a dense lookup); None when the
    # graph does not say (a sparse lookup's ids, counted at run time only)
    ids: int | None = Field(default=None, ge=0)

    def sums_bytes(self, row_bytes: int) -> int | None:
        """Bytes of the per-example sums [examples, dim] a shard returns, and of d_sum: one row of
        `row_bytes` per example; None when the examples are unknown."""
        return None if self.examples is None else self.examples * row_bytes


class VariableInfo(BaseModel):
    """One global variable of the captured graph."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)  # variable op name, e.g. "dense/kernel" (no ":0")
    shape: Shape
    dtype: DType
    trainable: bool
    grad: GradKind | None = None  # None = not updated by an optimizer
    # None when the runtime can split this variable into shards (created whole through
    # tf.compat.v1.get_variable and not read inside control flow); otherwise a short reason, e.g.
    # "read inside tf.while_loop". Capture fills it in. Not part of the fingerprint: it describes how
    # the graph was built, not the state a plan is tied to.
    partition_blocker: str | None = None
    # Set when every lookup of this variable could be pooled over its bags on the PS tasks (see
    # `PooledBags`); None when one cannot, when it has none, or when capture did not look (TF2
    # scripts, records made before it existed). Not part of the fingerprint, like the blocker.
    pooled: PooledBags | None = None

    @property
    def nbytes(self) -> int:
        """Memory size, the load measure of the PS builders. Unknown dimensions count as 1, so this
        is a lower bound for such variables."""
        return math.prod(1 if d == -1 else d for d in self.shape) * dtype_itemsize(self.dtype)


class GraphItem(BaseModel):
    """Everything the planner needs to know about the user's graph."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    kind: ScriptKind = "graph"
    keras: KerasFlavour | None = None  # a TF2 script's Keras; None for a graph script
    variables: list[VariableInfo]  # creation order
    optimizer: str | None = None  # class name, e.g. "GradientDescentOptimizer"
    # Whether the optimizer's per-variable updates read state its finish step changes (Adam's beta
    # powers; global_step under a decayed learning rate): the runtime then adds a barrier to a step
    # mixing synchronous PS variables and collectives (runtime/kernels/gradient_sync.py), and the
    # cost model charges it. Capture records the runtime's decision on the graph; None when not
    # recorded (older records, TF2 scripts), and the planner goes by `optimizer`
    # (strategies/optimizer_state.py). Not part of the fingerprint.
    updates_read_step_state: bool | None = None
    global_step: str | None = None  # op name of the global step variable, if any
    batch_size: int | None = Field(default=None, ge=1)  # examples per step per worker, if readable

    @model_validator(mode="after")
    def _unique_names(self) -> GraphItem:
        first: dict[str, int] = {}
        findings = []
        for i, var in enumerate(self.variables):
            if var.name in first:
                findings.append(
                    (("variables", i, "name"), f"duplicate variable '{var.name}' (also variables[{first[var.name]}])")
                )
            first.setdefault(var.name, i)
        if findings:
            raise Problems(findings)
        return self

    @property
    def fingerprint(self) -> str:
        """Identity of the graph's state: sha256 over (name, shape, dtype, trainable, grad) of every
        variable in creation order. Workers compare it with the plan's to refuse a different graph.
        `partition_blocker` and `pooled` are deliberately left out, so plans made before they
        existed stay valid.
        A TF2 script's kind is part of it (a plan made for one runtime cannot drive the other);
        a graph script's is not, so graph plans made before kinds existed stay valid. So is
        `keras: tf_keras` (it rules out split PS variables), and not Keras 3 (the default of TF2
        scripts), so Keras 3 plans made before the flavour was recorded stay valid."""
        variables = [[v.name, v.shape, v.dtype, v.trainable, v.grad] for v in self.variables]
        tagged = [self.kind, self.keras] if self.keras == "tf_keras" else [self.kind]
        canonical = json.dumps(variables if self.kind == "graph" else [*tagged, variables], separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def trainable_with_grads(self) -> list[VariableInfo]:
        """The variables a strategy plans: trainable and updated by an optimizer, in creation order."""
        return [v for v in self.variables if v.trainable and v.grad is not None]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> GraphItem:
        return cls.model_validate_json(text)


def save_graph_item(item: GraphItem, path: str | Path) -> None:
    Path(path).write_text(item.to_json() + "\n", encoding="utf-8")


def load_graph_item(path: str | Path) -> GraphItem:
    """Read a GraphItem JSON file; problems become one `UserError` naming the file and field."""
    return load_json_model(path, GraphItem)
