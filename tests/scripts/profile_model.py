"""A model for the profiling run's tests (tests/integration/test_profile_run.py).

An embedding of `--vocab` rows looked up by batches of `--batch` ids, each batch naming exactly
`--distinct` different rows (the rest repeats of them; drawn from the first `--head` rows when
given), and a dense layer on top; plain SGD. It
trains `--steps` steps in a Session, or with `--mts DIR` in a MonitoredTrainingSession that
checkpoints into DIR every 2 steps and counts steps in an events file there; `--saver DIR` saves with the
script's own Saver into DIR after every step, `--summaries DIR` writes an events file there.
`--dense` leaves out the embedding; `--keras` trains the same kind of model with tf_keras
`Model.fit` (its batches of `--batch` examples, each naming `--distinct` rows; `--saver DIR`: a
ModelCheckpoint callback saves the weights into DIR after every batch). It prints
`start-step N` (the global step it starts from) and `done`.
"""

import argparse

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--vocab", type=int, default=100)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--distinct", type=int, default=7)
parser.add_argument("--head", type=int)
parser.add_argument("--dense", action="store_true")
parser.add_argument("--mts")
parser.add_argument("--saver")
parser.add_argument("--summaries")
parser.add_argument("--keras", action="store_true")
args = parser.parse_args()

rng = np.random.default_rng(3)


def batch_ids():
    rows = rng.choice(args.head or args.vocab, size=args.distinct, replace=False)
    return rng.permutation(np.concatenate([rows, rng.choice(rows, size=args.batch - args.distinct)]))


def feed():
    return {x: rng.normal(size=(args.batch, 8)).astype(np.float32), id_input: batch_ids(),
            y: rng.normal(size=(args.batch, 1)).astype(np.float32)}


if args.keras:
    import tf_keras as keras

    model = keras.Sequential([keras.layers.Embedding(args.vocab, 8, input_length=1), keras.layers.Flatten(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.legacy.SGD(0.01), loss="mse")
    ids = np.concatenate([batch_ids() for _ in range(args.steps)]).reshape(-1, 1)
    # with --saver DIR: ModelCheckpoint saves the weights after every batch
    saving = [keras.callbacks.ModelCheckpoint(f"{args.saver}/weights.h5", save_weights_only=True, save_freq=1)]
    model.fit(ids, rng.normal(size=(len(ids), 1)), batch_size=args.batch, shuffle=False, verbose=0,
              callbacks=saving if args.saver else [])
    print("done", flush=True)
    raise SystemExit(0)


x = tf1.placeholder(tf.float32, [None, 8], name="x")
id_input = tf1.placeholder(tf.int64, [None], name="ids")
y = tf1.placeholder(tf.float32, [None, 1], name="y")
features = x
if not args.dense:
    emb = tf1.get_variable("emb", [args.vocab, 8])
    features = x + tf.nn.embedding_lookup(emb, id_input)
pred = tf.matmul(features, tf1.get_variable("dense/kernel", [8, 1])) + tf1.get_variable("dense/bias", [1])
loss = tf.reduce_mean(tf.square(pred - y))
tf1.summary.scalar("loss", loss)
step = tf1.train.get_or_create_global_step()
train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)

if args.mts:
    # its step counter writes an events file into DIR every step (summaries would need the feed)
    with tf1.train.MonitoredTrainingSession(checkpoint_dir=args.mts, save_checkpoint_steps=2, save_summaries_steps=None,
                                            save_summaries_secs=None, log_step_count_steps=1) as sess:
        print("start-step", sess.run(step), flush=True)
        for _ in range(args.steps):
            sess.run(train_op, feed())
else:
    saver = tf1.train.Saver()
    summaries = tf1.summary.merge_all()
    with tf1.Session() as sess:
        writer = tf1.summary.FileWriter(args.summaries, sess.graph) if args.summaries else None
        sess.run(tf1.global_variables_initializer())
        print("start-step", sess.run(step), flush=True)
        for _ in range(args.steps):
            _, summary = sess.run([train_op, summaries], feed())
            if writer:
                writer.add_summary(summary, sess.run(step))
            if args.saver:
                saver.save(sess, f"{args.saver}/model.ckpt", global_step=step)
print("done", flush=True)
