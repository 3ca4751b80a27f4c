"""The benchmark's models as a Keras user writes them: layers, `compile` and `fit` (TF2 mode).

One definition serves Keras 3 (`import keras`, the workload script bench/workloads/keras_fit.py
and the MultiWorkerMirroredStrategy custom-loop peer) and tf_keras (TF_USE_LEGACY_KERAS=1, the
tf_keras `fit` peer): every builder takes the Keras module to build with, and uses only layers both
have. The sizes and the data are bench/workloads/models.py's (dense, sparse, ncf: the same
variables, initializers and batches as the graph-mode scripts, so adrun's two modes move the same
bytes), plus a small Transformer that exists only here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import tensorflow as tf

from models import NCF, POOL_BATCHES, Dense, Sparse, worker_data


@dataclass(frozen=True)
class Transformer:
    """A small Transformer encoder classifier: token and learned position embeddings, `layers`
    blocks of multi-head self-attention and a feed-forward layer (post-norm residuals), mean-pooled
    to `classes` logits. The token embedding's gradient is sparse (the rows a batch reads), the
    blocks' dense: a mixed step like NCF's, with more compute per byte."""

    name: ClassVar[str] = "transformer"
    default_batch_size: ClassVar[int] = 32
    learning_rate: ClassVar[float] = 0.05
    vocab: int = 8000
    seq: int = 64
    dim: int = 128
    heads: int = 4
    ff: int = 256
    layers: int = 2
    classes: int = 10

    def __post_init__(self):
        if self.dim % self.heads:
            raise ValueError(f"--dim must be a multiple of --heads: got --dim {self.dim} --heads {self.heads}")

    def data(self, rng: np.random.Generator, examples: int) -> tuple[np.ndarray, ...]:
        tokens = rng.integers(0, self.vocab, size=(examples, self.seq), dtype=np.int64)
        label = (tokens[:, :4].sum(axis=1) % self.classes).astype(np.int64)  # a function of the first tokens
        return tokens, label


# Keras workloads by model name: the sizes (one flag per field) and data of each
SIZES: dict[str, type] = {"dense": Dense, "sparse": Sparse, "ncf": NCF, "transformer": Transformer}


def workload_name(model: str) -> str:
    """The benchmark's name of a model's Keras workload (`dense` -> `dense_keras`): the result files
    and the benchmark's tables use it, apart from the graph-mode script of the same model."""
    return f"{model}_keras"


def build(keras, sizes) -> object:
    """The uncompiled Keras model for `sizes` (an instance of a SIZES class), made with `keras`."""
    layers = keras.layers
    if isinstance(sizes, Dense):
        return keras.Sequential([
            keras.Input((sizes.image, sizes.image, 3)),
            layers.Conv2D(sizes.conv1, 3, padding="same", activation="relu", name="conv1"),
            layers.MaxPooling2D(2),
            layers.Conv2D(sizes.conv2, 3, padding="same", activation="relu", name="conv2"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(sizes.fc, activation="relu", name="fc"),
            layers.Dense(sizes.classes, name="logits"),
        ])
    normal = keras.initializers.RandomNormal(stddev=0.05)
    if isinstance(sizes, Sparse):
        return keras.Sequential([
            keras.Input((sizes.bag,), dtype="int64"),
            layers.Embedding(sizes.vocab, sizes.dim, embeddings_initializer=normal, name="embedding"),
            layers.GlobalAveragePooling1D(),
            layers.Dense(sizes.hidden, activation="relu", name="hidden"),
            layers.Dense(sizes.classes, name="logits"),
        ])
    if isinstance(sizes, NCF):
        user, item = keras.Input((), dtype="int64", name="user"), keras.Input((), dtype="int64", name="item")
        u = layers.Embedding(sizes.users, sizes.dim, embeddings_initializer=normal, name="user_embedding")(user)
        v = layers.Embedding(sizes.items, sizes.dim, embeddings_initializer=normal, name="item_embedding")(item)
        x = layers.Concatenate()([u, v, layers.Multiply()([u, v])])
        x = layers.Dense(sizes.hidden, activation="relu", name="mlp1")(x)
        x = layers.Dense(sizes.hidden // 2, activation="relu", name="mlp2")(x)
        return keras.Model([user, item], layers.Dense(1, name="click")(x))
    if isinstance(sizes, Transformer):
        tokens = keras.Input((sizes.seq,), dtype="int64")
        x = layers.Embedding(sizes.vocab, sizes.dim, embeddings_initializer=normal, name="tokens")(tokens)
        x = _positions(keras, sizes)(x)
        for i in range(sizes.layers):
            attended = layers.MultiHeadAttention(sizes.heads, sizes.dim // sizes.heads, name=f"attention{i}")(x, x)
            x = layers.LayerNormalization(name=f"norm{i}a")(layers.Add()([x, attended]))
            fed = layers.Dense(sizes.dim, name=f"ff{i}b")(layers.Dense(sizes.ff, activation="relu", name=f"ff{i}a")(x))
            x = layers.LayerNormalization(name=f"norm{i}b")(layers.Add()([x, fed]))
        return keras.Model(tokens, layers.Dense(sizes.classes, name="logits")(layers.GlobalAveragePooling1D()(x)))
    raise TypeError(f"no Keras model for {type(sizes).__name__}")


def _positions(keras, sizes: Transformer):
    """A layer adding a learned (seq, dim) position embedding: Keras 3 and tf_keras have no common
    built-in one, so it is a small subclass of the given module's Layer."""

    class Positions(keras.layers.Layer):
        def build(self, input_shape):
            self.table = self.add_weight(name="table", shape=(sizes.seq, sizes.dim),
                                         initializer=keras.initializers.RandomNormal(stddev=0.02))

        def call(self, x):
            return x + self.table

    return Positions(name="positions")


def loss(keras, sizes, **options) -> object:
    """The model's training loss, cross-entropy on logits (`options`, e.g. `reduction`, go to the
    Keras loss: the mean over the batch by default)."""
    if isinstance(sizes, NCF):
        return keras.losses.BinaryCrossentropy(from_logits=True, **options)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, **options)


def dataset(sizes, seed: int, worker: int, batch_size: int, pool_batch_size: int | None = None) -> tf.data.Dataset:
    """This worker's examples as (features, label) batches of `batch_size`, repeated forever. The
    pool is POOL_BATCHES batches of `pool_batch_size` (default `batch_size`): the graph-mode
    scripts' very examples when that is their per-worker batch."""
    arrays = worker_data(sizes, seed, worker, pool_batch_size or batch_size, POOL_BATCHES)
    features = arrays[0] if len(arrays) == 2 else tuple(arrays[:-1])
    return tf.data.Dataset.from_tensor_slices((features, arrays[-1])).batch(batch_size, drop_remainder=True).repeat()


def step_timer(keras, warmup: int):
    """A callback of `keras` timing fit's steps after the first `warmup`: wall and CPU seconds from
    the end of batch `warmup` - 1 (or the start of training) to the end of training, the same
    steps and clocks as the graph-mode scripts time."""

    class StepTimer(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.start = self.cpu_start = 0.0
            self.seconds = self.cpu_seconds = 0.0

        def _begin(self) -> None:
            self.start, self.cpu_start = time.perf_counter(), time.process_time()

        def on_train_begin(self, logs=None) -> None:
            if warmup == 0:
                self._begin()

        def on_train_batch_end(self, batch, logs=None) -> None:  # logs are read: the step has run
            if batch == warmup - 1:
                self._begin()

        def on_train_end(self, logs=None) -> None:
            self.seconds, self.cpu_seconds = time.perf_counter() - self.start, time.process_time() - self.cpu_start

    return StepTimer()
