"""How many distinct rows of each sparse variable a worker's step touches, from the workloads' own data.

The strategies' lower bound needs it: a PS pull or push moves the distinct rows, not the 2,560
lookups of a Zipf batch. The data are the workers' real batches (bench/workloads/models.py with
the scripts' defaults: seed 0, the pool the scripts cycle through), so the figure is exact for the
benchmark's runs: the mean over the pool's batches of the distinct ids per batch, per shard when
the plan splits the variable (TF's row ranges, `shard_sizes`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from adrun.strategies.document import Strategy, shard_sizes

from .tf2 import keras_model

# which input array of a workload's batch holds the ids of which embedding (models.py's and
# keras_models.py's `data`), by the variable names the plans give them (Keras: layer/weight)
ID_INPUTS = {"sparse": {"embedding": 0}, "embed": {"embedding": 0}, "ncf": {"user_embedding": 0, "item_embedding": 1},
             "sparse_keras": {"sequential/embedding/embeddings": 0}, "transformer_keras": {"tokens/embeddings": 0},
             "ncf_keras": {"user_embedding/embeddings": 0, "item_embedding/embeddings": 1}}
SEED = 0  # the workload scripts' default --seed


def distinct_rows(workloads_dir: Path, workload: str, plan: Strategy) -> dict[str, list[int]]:
    """{variable or `name/part_i`: distinct rows per step for each worker} for the plan's sparse
    variables (an empty dict for a workload without embeddings)."""
    inputs = ID_INPUTS.get(workload, {})
    if not inputs:
        return {}
    sys.path.insert(0, str(workloads_dir))
    try:
        from keras_models import SIZES
        from models import POOL_BATCHES, WORKLOADS, worker_data
    finally:
        sys.path.remove(str(workloads_dir))
    model = (SIZES[keras] if (keras := keras_model(workload)) else WORKLOADS[workload])()
    batch = model.default_batch_size
    out: dict[str, list[int]] = {}
    for var in plan.variables:
        if var.grad != "sparse" or var.name not in inputs:
            continue
        per_worker = [worker_data(model, SEED, w, batch, POOL_BATCHES)[inputs[var.name]].reshape(POOL_BATCHES, -1)
                      for w in range(plan.num_workers)]
        if var.partition is None:
            out[var.name] = [_mean_distinct(ids, 0, var.shape[0]) for ids in per_worker]
            continue
        bounds = np.cumsum([0, *shard_sizes(var.shape[0], len(var.partition.shards))])
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            out[f"{var.name}/part_{i}"] = [_mean_distinct(ids, lo, hi) for ids in per_worker]
    return out


def _mean_distinct(batches: np.ndarray, lo: int, hi: int) -> int:
    """Distinct ids in [lo, hi) per batch (row of `batches`), averaged and rounded."""
    return round(float(np.mean([np.unique(b[(b >= lo) & (b < hi)]).size for b in batches])))
