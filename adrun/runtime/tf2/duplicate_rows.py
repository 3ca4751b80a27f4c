"""Whether an optimizer applies a sparse gradient only through its rows summed per index, and that sum.

Such an optimizer takes the same step from an IndexedSlices with repeated indices as from its rows
summed per index, so a worker may sum its rows before the all-gather (reduction.py) or the push to a
PS (ps_apply.py) and each looked-up id crosses the network once per worker instead of once per lookup. What qualifies was read from the
installed Keras 3.15 and tf_keras sources and is held by tests/unit/adrun/runtime/tf2/test_duplicate_rows.py:

- Keras 3, TF backend (keras/src/backend/tensorflow/sparse.py, numpy.py, optimizer.py): an op mixing
  an IndexedSlices with a dense tensor densifies it (duplicates summed); unary ops (`square`, `abs`,
  `sign`) and multiplication by a scalar map each row on its own; `assign*` scatter row by row. So
  SGD (with momentum or Nesterov) and Lion, linear in the gradient until a dense sum, qualify; Adam,
  AdamW, Nadam, Adamax, Adagrad, RMSprop, Adadelta, Ftrl, Lamb and Adafactor square (or take the
  absolute value of) each row first: the sum of squares is not the square of the sum. With
  `gradient_accumulation_steps` every optimizer sees the dense accumulator, clipping included.
- tf_keras (`Optimizer.apply_gradients` calls `_deduplicate_sparse_grad`; the legacy `OptimizerV2`
  applies through `_resource_apply_sparse_duplicate_indices`, which sums, or in legacy SGD scatters
  linearly): every optimizer of both families sums duplicates before its update rule.
- Clipping (`clipnorm`, `global_clipnorm`, `clipvalue`) works on the rows as given (their norm, each
  value) in all three families, so it disqualifies, except under Keras 3 gradient accumulation.
- A LossScaleOptimizer unscales linearly and applies through its inner optimizer, which decides.
  (Its finite check sees a non-finite sum wherever a row is non-finite.)

An optimizer of any other class, or a subclass that overrides the method read here, keeps its rows.
"""

from __future__ import annotations

import sys
from typing import Any

import tensorflow as tf

_CLIPPING = ("clipnorm", "global_clipnorm", "clipvalue")


def _loaded(module: str, name: str) -> Any:
    """`module.name` if that module is imported, else None: a script's optimizer comes from a loaded
    module, so a family the script never imported cannot be its optimizer's."""
    found = sys.modules.get(module)
    return getattr(found, name, None) if found is not None else None


def sums_duplicate_rows(optimizer: Any) -> bool:
    """Whether `optimizer` applies a sparse gradient only through its rows summed per index."""
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        return sums_duplicate_rows(inner)
    keras3 = _loaded("keras.src.optimizers.base_optimizer", "BaseOptimizer")
    if keras3 is not None and isinstance(optimizer, keras3):
        if getattr(optimizer, "gradient_accumulation_steps", None):
            return True
        linear = [_loaded(f"keras.src.optimizers.{m}", c) for m, c in (("sgd", "SGD"), ("lion", "Lion"))]
        return _unclipped(optimizer) and type(optimizer).update_step in [c.update_step for c in linear if c]
    tf_keras = _loaded("tf_keras.src.optimizers.optimizer", "_BaseOptimizer")
    if tf_keras is not None and isinstance(optimizer, tf_keras):
        return _unclipped(optimizer) and type(optimizer)._deduplicate_sparse_grad is tf_keras._deduplicate_sparse_grad
    legacy = _loaded("tf_keras.src.optimizers.legacy.optimizer_v2", "OptimizerV2")
    if legacy is not None and isinstance(optimizer, legacy):
        legacy_sgd = _loaded("tf_keras.src.optimizers.legacy.gradient_descent", "SGD")
        summing = [c._resource_apply_sparse_duplicate_indices for c in (legacy, legacy_sgd) if c is not None]
        return _unclipped(optimizer) and type(optimizer)._resource_apply_sparse_duplicate_indices in summing
    return False


def _unclipped(optimizer: Any) -> bool:
    return not any(getattr(optimizer, attr, None) for attr in _CLIPPING)


def summed_per_index(grad: tf.IndexedSlices) -> tf.IndexedSlices:
    """`grad` with one row per distinct index, the rows of equal index summed (indices in order of
    first appearance: the optimizers that qualify do not need them sorted)."""
    indices, positions = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, positions, tf.size(indices))
    return tf.IndexedSlices(values, indices, grad.dense_shape)
