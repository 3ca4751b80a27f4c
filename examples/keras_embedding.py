"""examples/embedding.py as a Keras 3 script (TF2 mode): an embedding table (IndexedSlices
gradients) and a dense head, trained with Adagrad by `model.fit`. Runs unchanged with
`python examples/keras_embedding.py` or under adrun.
"""

import argparse
import os

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--vocab", type=int, default=1000)
args = parser.parse_args()

rank = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
rng = np.random.default_rng(99 + rank)
word_score = np.random.default_rng(0).normal(size=args.vocab).astype(np.float32)
ids = rng.integers(0, args.vocab, size=(args.steps * args.batch_size, 10))
target = (word_score[ids].mean(axis=1) > 0).astype(np.float32)

model = keras.Sequential([
    keras.Input((10,), dtype="int64"),
    keras.layers.Embedding(args.vocab, 16, embeddings_initializer=keras.initializers.RandomNormal(stddev=0.1)),
    keras.layers.GlobalAveragePooling1D(),
    keras.layers.Dense(1, use_bias=False),
])
model.compile(optimizer=keras.optimizers.Adagrad(1.0), loss=keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(ids, target, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=2)
