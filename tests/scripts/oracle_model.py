"""Model script for the equivalence and averaging oracles (docs/testing.md).

Under adrun (or plain python) it trains `--steps` steps and writes every worker's final trainable
variables and global_step to OUT/w<index>.npz. With `--reference N` (plain python only) it instead
computes what synchronous data-parallel SGD over N workers must give: at each step the gradient
of every worker's batch is computed separately, the N gradients are averaged in numpy (sparse ones
densified, so a row touched by one worker gets 1/N of its gradient) and the SGD update is applied
in numpy, starting from the chief's initial values (--init-from); the result goes to
OUT/reference.npz.
"""

import argparse
import os
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["dense", "sparse", "tables", "dense-first", "keras", "mts", "while", "lstm",
                                       "bags-sum", "bags-sparse"], required=True)
parser.add_argument("--combiner", choices=["mean", "sum", "sqrtn"], default="mean", help="--model bags-sparse's")
parser.add_argument("--optimizer", choices=["sgd", "adam", "momentum", "rmsprop", "adagrad"], default="sgd")
parser.add_argument("--data", choices=["same", "per-worker"], required=True)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--out", required=True)
parser.add_argument("--reference", type=int, default=0, help="number of workers to emulate")
parser.add_argument("--init-from", help="reference mode: start from the init/ values of this npz")
parser.add_argument("--graph", action="store_true", help="also write the worker's graph as adrun rewrote it, "
                    "as a GraphDef, to OUT/w<index>.graph.pb: a test reads back the waits adrun added")
parser.add_argument("--hold", metavar="FILE", help="after the first step, print `holding` and wait (at most 300 s) "
                    "until FILE exists: a test probes the job while it trains")
args = parser.parse_args()

BATCH, VOCAB = 8, 20
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))


def batch_for(w: int, step: int):
    source = w if args.data == "per-worker" else 0
    rng = np.random.default_rng(1000 * source + step)
    x = rng.normal(size=(BATCH, 4)).astype(np.float32)
    ids = rng.integers(0, VOCAB // 2 if source % 2 else VOCAB, size=(BATCH, 3))  # workers touch different rows
    y = rng.normal(size=(BATCH, 3)).astype(np.float32)
    return x, ids, y


x = tf1.placeholder(tf.float32, [None, 4], name="x")
ids = tf1.placeholder(tf.int64, [None, 3], name="ids")
y = tf1.placeholder(tf.float32, [None, 3], name="y")
if args.model in ("sparse", "dense-first"):  # dense-first: optimizer state colocates with a dense variable
    if args.model == "dense-first":  # v1 Adam colocates beta powers with the first variable by name
        w = tf1.get_variable("a_dense", [4, 3], initializer=tf1.random_normal_initializer(seed=2))
    emb = tf1.get_variable("emb", [VOCAB, 4], initializer=tf1.random_normal_initializer(seed=1))
    if args.model == "sparse":
        w = tf1.get_variable("w", [4, 3], initializer=tf1.random_normal_initializer(seed=2))
    pred = tf.matmul(tf.reduce_mean(tf.nn.embedding_lookup(emb, ids), axis=1), w)
elif args.model == "bags-sum":  # bags summed, not averaged
    emb = tf1.get_variable("emb", [VOCAB, 4], initializer=tf1.random_normal_initializer(seed=1))
    w = tf1.get_variable("w", [4, 3], initializer=tf1.random_normal_initializer(seed=2))
    pred = tf.matmul(tf.reduce_sum(tf.nn.embedding_lookup(emb, ids), axis=1), w)
elif args.model == "bags-sparse":  # embedding_lookup_sparse: bags of 1-3 ids, example 1's bag empty
    emb = tf1.get_variable("emb", [VOCAB, 4], initializer=tf1.random_normal_initializer(seed=1))
    w = tf1.get_variable("w", [4, 3], initializer=tf1.random_normal_initializer(seed=2))
    rows, columns = tf.meshgrid(tf.range(tf.shape(ids)[0]), tf.range(3), indexing="ij")
    # an id divisible by 4 is dropped unless it is its bag's first; bag 1 is empty, the last one is not
    kept = tf.logical_and(tf.logical_or(tf.not_equal(ids % 4, 0), tf.equal(columns, 0)), tf.not_equal(rows, 1))
    where = tf.where(kept)
    sp_ids = tf.SparseTensor(where, tf.gather_nd(ids, where), tf.shape(ids, out_type=tf.int64))
    pred = tf.matmul(tf.nn.embedding_lookup_sparse(emb, sp_ids, None, combiner=args.combiner), w)
elif args.model == "tables":  # three equal embeddings: a PS plan puts one on each of 3 PS tasks
    tables = [tf1.get_variable(f"emb{k}", [VOCAB, 4], initializer=tf1.random_normal_initializer(seed=1 + k))
              for k in range(3)]
    w = tf1.get_variable("w", [4, 3], initializer=tf1.random_normal_initializer(seed=5))
    pooled = tf.add_n([tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1) for table in tables])
    pred = tf.matmul(pooled, w)
elif args.model == "keras":
    hidden = tf.keras.layers.Dense(5, activation="tanh", name="hidden")(x)
    pred = tf.keras.layers.Dense(3, name="out")(hidden)
elif args.model == "while":  # a variable read inside tf.while_loop, three times per step
    w = tf1.get_variable("w", [4, 4])
    v = tf1.get_variable("v", [4, 3])
    _, state = tf1.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, tf.tanh(tf.matmul(s, w))), [0, x])
    pred = tf.matmul(state, v)
elif args.model == "lstm":  # Keras LSTM over the 4 features as a sequence of length 4
    sequence = tf.expand_dims(x, -1)
    pred = tf.keras.layers.Dense(3, name="head")(tf.keras.layers.LSTM(5, name="lstm")(sequence))
else:  # dense, mts
    w = tf1.get_variable("w", [4, 3])  # unseeded glorot: replicas must still start equal
    b = tf1.get_variable("b", [3], initializer=tf1.zeros_initializer())
    pred = tf.matmul(x, w) + b
loss = tf.reduce_mean(tf.square(pred - y))
global_step = tf1.train.get_or_create_global_step()
variables = tf1.trainable_variables()
names = [v.op.name for v in variables]


def logical_values(sess) -> dict:
    """Trainable values by variable name, shards of a partitioned variable put back together
    (in an adrun run with a partitioning strategy, trainable_variables() lists TF's shards)."""
    pieces: dict = {}
    for v, value in zip(tf1.trainable_variables(), sess.run(tf1.trainable_variables())):
        info = v._save_slice_info
        name = info.full_name if info is not None else v.op.name
        pieces.setdefault(name, []).append((list(info.var_offset) if info is not None else [], value))
    result = {}
    for name, parts in pieces.items():
        parts.sort(key=lambda p: p[0])
        axis = next((i for i, o in enumerate(zip(*[p[0] for p in parts])) if len(set(o)) > 1), 0)
        result[name] = np.concatenate([p[1] for p in parts], axis=axis) if len(parts) > 1 else parts[0][1]
    return result


def feed(w_index: int, step: int):
    xs, idv, ys = batch_for(w_index, step)
    return {x: xs, ids: idv, y: ys}


def make_optimizer():
    # Adam's epsilon is raised from 1e-8: a gradient element that cancels to rounding level would
    # otherwise get a full-size step whose sign is that rounding, and runs that sum the same
    # gradient in another order (a batch split over in-graph replicas) would differ by up to lr
    return {
        "sgd": lambda: tf1.train.GradientDescentOptimizer(args.lr),
        "adam": lambda: tf1.train.AdamOptimizer(args.lr, epsilon=1e-3),
        "momentum": lambda: tf1.train.MomentumOptimizer(args.lr, 0.9),
        "rmsprop": lambda: tf1.train.RMSPropOptimizer(args.lr),
        "adagrad": lambda: tf1.train.AdagradOptimizer(args.lr),
    }[args.optimizer]()


def mean_gradient(per_worker: list):
    """Data-parallel mean of one variable's per-worker gradients: dense arrays averaged; sparse
    rows of every worker kept, values divided by N (a row one worker touched gets 1/N of it)."""
    if hasattr(per_worker[0], "indices"):
        return (np.concatenate([g.indices for g in per_worker]),
                np.concatenate([g.values for g in per_worker]) / len(per_worker))
    return np.mean(per_worker, axis=0)


def densify(grad, var_value):
    if hasattr(grad, "indices"):
        dense = np.zeros_like(var_value)
        np.add.at(dense, grad.indices, grad.values)
        return dense
    return grad


os.makedirs(args.out, exist_ok=True)
if args.reference:
    grads = tf.gradients(loss, variables)
    start = np.load(args.init_from)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        values = [start["init/" + n] for n in names]
        if args.optimizer == "sgd":  # the update itself in numpy too
            for step in range(args.steps):
                per_worker = []
                for w_index in range(args.reference):
                    for v, value in zip(variables, values):
                        v.load(value, sess)
                    per_worker.append([densify(g, val) for g, val in zip(sess.run(grads, feed(w_index, step)), values)])
                values = [val - args.lr * np.mean([pw[i] for pw in per_worker], axis=0) for i, val in enumerate(values)]
        else:  # the optimizer's own update, applied once per step to the mean gradient
            slots = []
            for g, v in zip(grads, variables):
                if hasattr(g, "indices"):
                    slots.append(tf.IndexedSlices(tf1.placeholder(v.dtype, [None, *v.shape[1:]]), tf1.placeholder(tf.int64, [None]), v.shape))
                else:
                    slots.append(tf1.placeholder(v.dtype, v.shape))
            apply = make_optimizer().apply_gradients(zip(slots, variables))
            sess.run(tf1.global_variables_initializer())
            for v, value in zip(variables, values):
                v.load(value, sess)
            for step in range(args.steps):
                current = sess.run(variables)
                per_worker = []
                for w_index in range(args.reference):
                    per_worker.append(sess.run(grads, feed(w_index, step)))
                fed = {}
                for i, slot in enumerate(slots):
                    mean = mean_gradient([pw[i] for pw in per_worker])
                    if isinstance(slot, tf.IndexedSlices):
                        fed[slot.indices], fed[slot.values] = mean
                    else:
                        fed[slot] = mean
                for v, value in zip(variables, current):
                    v.load(value, sess)
                sess.run(apply, fed)
            values = sess.run(variables)
        result = {"final/" + n: v for n, v in zip(names, values)}
        np.savez(os.path.join(args.out, "reference.npz"), global_step=args.steps, **result)
    raise SystemExit(0)

train_op = make_optimizer().minimize(loss, global_step=global_step)
if args.model == "mts":
    with tf1.train.MonitoredTrainingSession() as sess:
        initial = logical_values(sess)
        for step in range(args.steps):
            sess.run(train_op, feed(worker, step))
        final, gs = logical_values(sess), sess.run(global_step)
else:
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        initial = logical_values(sess)
        for step in range(args.steps):
            sess.run(train_op, feed(worker, step))
            if step == 0 and args.hold:
                print("holding", flush=True)
                for _ in range(3000):
                    if os.path.exists(args.hold):
                        break
                    time.sleep(0.1)
        final, gs = logical_values(sess), sess.run(global_step)
result = {f"{kind}/{n}": v for kind, vals in (("init", initial), ("final", final)) for n, v in vals.items()}
np.savez(os.path.join(args.out, f"w{worker}.npz"), global_step=gs, **result)
if args.graph:  # not tf.io.write_graph: under adrun that writes to a scratch directory (no_trace.py)
    with open(os.path.join(args.out, f"w{worker}.graph.pb"), "wb") as graph_file:
        graph_file.write(tf1.get_default_graph().as_graph_def().SerializeToString())
print(f"worker {worker} done: global_step={gs}")
