"""A TF2 eager script: trains with GradientTape and never creates a tf.compat.v1.Session."""

import tensorflow as tf

w = tf.Variable(0.0)
for _ in range(2):
    with tf.GradientTape() as tape:
        loss = (w - 1.0) ** 2
    w.assign_sub(0.1 * tape.gradient(loss, w))
print("eager done", float(w.numpy()))
