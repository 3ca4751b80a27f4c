"""A sparse model: an embedding table (IndexedSlices gradients) and a dense head, trained with
Adagrad in graph mode. Runs unchanged with `python examples/embedding.py` or under adrun.
"""

import argparse
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--vocab", type=int, default=1000)
args = parser.parse_args()

rank = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
rng = np.random.default_rng(99 + rank)
word_score = np.random.default_rng(0).normal(size=args.vocab).astype(np.float32)

ids = tf1.placeholder(tf.int64, [None, 10], name="ids")
label = tf1.placeholder(tf.float32, [None], name="label")
embedding = tf1.get_variable("embedding", [args.vocab, 16], initializer=tf1.random_normal_initializer(stddev=0.1))
pooled = tf.reduce_mean(tf.nn.embedding_lookup(embedding, ids), axis=1)
head = tf1.get_variable("head", [16, 1], initializer=tf1.glorot_uniform_initializer())
logit = tf.squeeze(tf.matmul(pooled, head), axis=1)
loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logit))
train_op = tf1.train.AdagradOptimizer(1.0).minimize(loss)

with tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    for step in range(args.steps):
        batch = rng.integers(0, args.vocab, size=(args.batch_size, 10))
        target = (word_score[batch].mean(axis=1) > 0).astype(np.float32)
        _, value = sess.run([train_op, loss], {ids: batch, label: target})
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step} loss {value:.4f}")
