"""Gradient compressors for all-reduce: fewer bytes on the wire for a bounded error.

- `fp16`: each worker sends its gradient divided by N in half precision; the sum is the mean.
- `fp16-ef`: the same with error feedback: what rounding lost this step is kept in a per-worker
  variable and added to the next step's gradient, so rounding errors do not accumulate.
- `powersgd`: a rank-r approximation P Qᵀ of each matrix-shaped gradient (Vogels et al., 2019):
  one power-iteration step per training step, warm-started from the previous Q, with error
  feedback. Workers all-reduce P (n×r) and Q (m×r) instead of the n×m gradient: the P of every
  matrix of a plan group in one collective, then their Q in another.

A compressor's state (error feedback, PowerSGD's Q) is made by the caller's `StateFactory`: graph
mode makes adrun's own v1 variables (no collection: not saved, not in the plan's fingerprint) whose
initializers the session setup runs on every worker; TF2 mode makes each once, eagerly
(adrun/runtime/tf2/reduction.py).
"""

from __future__ import annotations

import functools

import zlib
from collections.abc import Callable

import tensorflow as tf

from adrun.strategies.document import low_rank_applies

Reduce = Callable[[tf.Tensor, str], tf.Tensor]  # (tensor, label) -> mean over workers
# (initial value's maker, name) -> this worker's state variable of that name
StateFactory = Callable[[Callable[[], tf.Tensor], str], tf.Variable]


def fp16_mean(grads: list[tf.Tensor], num_workers: int, reduce_sum: Reduce, label: str) -> list[tf.Tensor]:
    flat = tf.concat([tf.reshape(g / tf.cast(num_workers, g.dtype), [-1]) for g in grads], axis=0)
    summed = reduce_sum(tf.cast(flat, tf.float16), label)
    pieces = tf.split(tf.cast(summed, grads[0].dtype), [g.shape.num_elements() for g in grads])
    return [tf.reshape(p, g.shape) for p, g in zip(pieces, grads, strict=True)]


def fp16_ef_mean(
    named: list[tuple[str, tf.Tensor]], num_workers: int, reduce_sum: Reduce, label: str, state: StateFactory,
) -> list[tf.Tensor]:
    compensated, residual_updates = [], []
    for name, grad in named:
        residual = state(functools.partial(tf.zeros, grad.shape, grad.dtype), f"adrun_ef/{name}")
        value = grad / tf.cast(num_workers, grad.dtype) + residual.read_value()
        sent = tf.cast(tf.cast(value, tf.float16), grad.dtype)
        residual_updates.append(residual.assign(value - sent, read_value=False))
        compensated.append(value)
    with tf.control_dependencies(residual_updates):
        flat = tf.concat([tf.reshape(tf.cast(c, tf.float16), [-1]) for c in compensated], axis=0)
    summed = reduce_sum(flat, label)
    pieces = tf.split(tf.cast(summed, named[0][1].dtype), [g.shape.num_elements() for _, g in named])
    return [tf.reshape(p, g.shape) for p, (_, g) in zip(pieces, named, strict=True)]


def powersgd_applies(shape: tf.TensorShape, rank: int) -> bool:
    """Low rank only pays for matrices with both sides larger than the rank (and is exact-ish
    otherwise): vectors and small tensors are reduced uncompressed (`low_rank_applies`)."""
    return shape.is_fully_defined() and low_rank_applies(shape.as_list(), rank)


def powersgd_means(
    named: list[tuple[str, tf.Tensor, int]], reduce_mean: Reduce, label: str, state: StateFactory
) -> list[tf.Tensor]:
    """PowerSGD's mean of each (name, gradient, rank) of one plan group and dtype: every matrix's P
    goes in one all-reduce and every Q in a second, so a group costs two collectives whatever its
    number of matrices. Each collective is a message per ring neighbour with its own request and
    framing (gRPC, TCP): reduced one matrix at a time, the sparse Keras benchmark's plan (two
    matrices, 25.2 KB of factors a step) sent 4 of them where 2 suffice. The factors and their
    maths are each matrix's own; only their transport is shared."""
    dtype = named[0][1].dtype
    # tf.linalg.qr has no bfloat16 or float16 kernel: a half-precision gradient's factor maths runs
    # in float32; its state and the factors on the wire keep the gradient's dtype (the planned bytes)
    work = tf.float32 if dtype in (tf.bfloat16, tf.float16) else dtype
    matrices, qs, errors = [], [], []
    for name, grad, rank in named:
        n = grad.shape[0]
        m = grad.shape.num_elements() // n
        seed = [zlib.crc32(name.encode()) & 0x7FFFFFFF, 0]  # every worker starts from the same Q
        qs.append(state(functools.partial(tf.random.stateless_normal, [m, rank], seed, dtype=grad.dtype),
                        f"adrun_powersgd/{name}/q"))
        errors.append(state(functools.partial(tf.zeros, [n, m], grad.dtype), f"adrun_powersgd/{name}/error"))
        matrices.append(tf.cast(tf.reshape(grad, [n, m]) + errors[-1].read_value(), work))
    ps = _joint_mean([tf.matmul(a, tf.cast(q.read_value(), work)) for a, q in zip(matrices, qs, strict=True)],
                     reduce_mean, f"{label}/p", dtype)
    ps = [tf.linalg.qr(p)[0] for p in ps]
    local_qs = [tf.matmul(a, p, transpose_a=True) for a, p in zip(matrices, ps, strict=True)]
    new_qs = _joint_mean(local_qs, reduce_mean, f"{label}/q", dtype)
    out = []
    for (_, grad, _), a, p, local_q, new_q, q, error in zip(named, matrices, ps, local_qs, new_qs, qs, errors,
                                                            strict=True):
        approximation = tf.matmul(p, new_q, transpose_b=True)
        # this worker's own residual: what its part of the approximation missed
        residual = a - tf.matmul(p, local_q, transpose_b=True)
        updates = [q.assign(tf.cast(new_q, grad.dtype), read_value=False),
                   error.assign(tf.cast(residual, grad.dtype), read_value=False)]
        with tf.control_dependencies(updates):
            out.append(tf.reshape(tf.cast(approximation, grad.dtype), grad.shape))
    return out


def _joint_mean(tensors: list[tf.Tensor], reduce_mean: Reduce, label: str, wire: tf.DType) -> list[tf.Tensor]:
    """The mean of each of `tensors` (of one dtype, known shapes) by one collective on their
    concatenation, sent as `wire` and handed back in their own dtype."""
    flat = tf.concat([tf.reshape(tf.cast(t, wire), [-1]) for t in tensors], axis=0)
    mean = tf.cast(reduce_mean(flat, label), tensors[0].dtype)
    pieces = tf.split(mean, [t.shape.num_elements() for t in tensors])
    return [tf.reshape(piece, t.shape) for piece, t in zip(pieces, tensors, strict=True)]
