"""TF2 scripts of every kind adrun's TF2 mode runs (tests/integration/test_tf2_*.py).

`--kind` picks the script: Keras 3 `fit` (Sequential, functional, subclassed; with validation data
and a callback), a model overriding `train_step`, a GAN's two optimizers, `tf.function` and eager
custom loops, Embedding models (sparse gradients) with Adam and SGD, `mixed_float16`,
`steps_per_execution=4`, and tf_keras (run it with TF_USE_LEGACY_KERAS=1) with new and legacy Adam.

Worker w (ADRUN_WORKER_INDEX, of ADRUN_NUM_WORKERS) trains in batches of B on the whole data
(`--data same`) or its rows w::N (`--data per-worker`); `--skew-seed` initializes worker 1 from
another seed (equivalence: adrun must give it worker 0's values). `--reference N` trains one plain
process whose step k sees the union of the N workers' step-k batches (a batch of N*B): with a mean
loss its gradient is the mean of theirs, the step synchronous data parallelism must take. Writes the
final weights to OUT/w<index>.npz (or OUT/reference.npz); each epoch end appends a line to
OUT/epochs.txt (how far a capture got), each epoch begin `worker attempt epoch` to OUT/begun.txt (where
a restart resumed). `--save`, `--backup`, `--manager` and `--kill-after-epoch` exercise chief-only
saving and `--max-restarts` resuming from BackupAndRestore or a CheckpointManager.
"""

import argparse
import os

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--kind", required=True, choices=[
    "fit-sequential", "fit-functional", "fit-subclassed", "train-step", "gan", "loop-function", "loop-eager",
    "embed-adam", "embed-sgd", "mixed-fp16", "spe", "tfkeras-new", "tfkeras-legacy", "by-hand",
])
parser.add_argument("--data", choices=["same", "per-worker"], default="same")
parser.add_argument("--skew-seed", action="store_true", help="worker 1 initializes from another seed")
parser.add_argument("--reference", type=int, default=0, help="one process, the mean step of N workers")
parser.add_argument("--vocab", type=int, default=50, help="embed kinds: the table's rows (few rows: a batch's 40 ids "
                    "name each many times)")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--worker1-epochs", type=int, help="worker 1 trains this many epochs instead")
parser.add_argument("--out", required=True)
parser.add_argument("--save", help="fit kinds: also save under SAVE, in files named after the worker (chief-only "
                    "saving): ModelCheckpoint each epoch, keras.models.save_model and a tf.train.CheckpointManager at the end, "
                    "and worker 0 alone loads its model back")
parser.add_argument("--backup", help="fit kinds: fit with BackupAndRestore on this directory")
parser.add_argument("--manager", help="loop kinds: resume from a tf.train.CheckpointManager on this directory "
                    "(restore_or_initialize) and save to it at each epoch's end")
parser.add_argument("--kill-after-epoch", type=int, help="fit and loop kinds: on attempt 0 (ADRUN_RESTART_COUNT), "
                    "worker 0 kills itself (SIGKILL) at this epoch's end, after its backup or checkpoint")
parser.add_argument("--wait-for-w0", action="store_true", help="fit kinds: worker 1 waits after its first batch "
                    "until worker 0 has written its weights (asynchronous PS training must let worker 0 finish)")
args = parser.parse_args()

import tensorflow as tf  # noqa: E402

if args.kind.startswith("tfkeras"):
    import tf_keras as keras  # noqa: E402
else:
    import keras  # noqa: E402

BATCH, ROWS, FEATURES, VOCAB, IDS = 8, 64, 8, args.vocab, 5
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))
workers = int(os.environ.get("ADRUN_NUM_WORKERS", "1"))
os.makedirs(args.out, exist_ok=True)
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)


def dataset():
    rng = np.random.default_rng(0)
    if args.kind.startswith("embed"):
        x = rng.integers(0, VOCAB, size=(ROWS, IDS)).astype(np.int32)
        y = (x.sum(axis=1, keepdims=True) / (VOCAB * IDS)).astype(np.float32)
    else:
        x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
        y = (np.tanh(x @ rng.normal(size=(FEATURES, 1))) + 0.1 * rng.normal(size=(ROWS, 1))).astype(np.float32)
    return x, y


def union_of_workers(x, y, n):
    """Step k's batch of N*B rows: worker 0's step-k batch, then worker 1's, ..."""
    shards = [(x[r::n], y[r::n]) for r in range(n)] if args.data == "per-worker" else [(x, y)] * n
    steps = len(shards[0][0]) // BATCH
    pick = lambda part: np.concatenate([s[part][k * BATCH:(k + 1) * BATCH] for k in range(steps) for s in shards])
    return pick(0), pick(1)


x, y = dataset()
if args.reference:
    x, y = union_of_workers(x, y, args.reference)
    batch = BATCH * args.reference
elif args.data == "per-worker":
    x, y, batch = x[worker::workers], y[worker::workers], BATCH
else:
    batch = BATCH

if worker == 1 and args.worker1_epochs is not None:
    args.epochs = args.worker1_epochs
seed = 7 if args.skew_seed and worker == 1 and not args.reference else 1
keras.utils.set_random_seed(seed)
if args.kind == "mixed-fp16":
    keras.mixed_precision.set_global_policy("mixed_float16")


def dense_stack():
    if args.kind == "fit-functional":
        inputs = keras.Input((FEATURES,))
        return keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dense(16, activation="tanh")(inputs)))
    if args.kind == "fit-subclassed":
        class Net(keras.Model):
            def __init__(self):
                super().__init__()
                self.hidden = keras.layers.Dense(16, activation="tanh")
                self.head = keras.layers.Dense(1)

            def call(self, inputs):
                return self.head(self.hidden(inputs))

        return Net()
    if args.kind.startswith("embed"):
        return keras.Sequential([keras.Input((IDS,), dtype="int32"), keras.layers.Embedding(VOCAB, 4),
                                 keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    head = [keras.layers.Dense(1, dtype="float32")] if args.kind == "mixed-fp16" else [keras.layers.Dense(1)]
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation="tanh"), *head])


def optimizer():
    if args.kind == "embed-sgd":
        return keras.optimizers.SGD(0.5)
    if args.kind == "tfkeras-legacy":
        return keras.optimizers.legacy.Adam(1e-2)
    return keras.optimizers.Adam(1e-2)


attempt = int(os.environ.get("ADRUN_RESTART_COUNT", "0"))


class EpochMarks(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        with open(os.path.join(args.out, "begun.txt"), "a") as f:
            f.write(f"{worker} {attempt} {epoch}\n")

    def on_epoch_end(self, epoch, logs=None):
        with open(os.path.join(args.out, "epochs.txt"), "a") as f:
            f.write(f"{epoch}\n")
        if epoch == args.kill_after_epoch and attempt == 0 and worker == 0:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)


class WaitForWorker0(keras.callbacks.Callback):
    """Worker 1 stops after its first batch until worker 0 has finished (at most 120 s)."""

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0 and not getattr(self, "waited", False):
            self.waited = True
            import time

            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(args.out, "w0.npz")):
                if time.monotonic() > deadline:
                    raise SystemExit("worker 1: worker 0 did not finish while worker 1 waited")
                time.sleep(0.05)


def callbacks():
    """BackupAndRestore first, so that its epoch-end backup is written before EpochMarks may kill."""
    found = [keras.callbacks.BackupAndRestore(args.backup)] if args.backup else []
    if args.save:
        found.append(keras.callbacks.ModelCheckpoint(
            os.path.join(args.save, f"ckpt-w{worker}", "e{epoch}.weights.h5"), save_weights_only=True))
    if args.wait_for_w0 and worker == 1:
        found.append(WaitForWorker0())
    return [*found, EpochMarks()]


def save_at_end(model):
    if args.save:
        path = os.path.join(args.save, f"model-w{worker}.keras")
        keras.models.save_model(model, path)  # the public alias of saving_api's function, bound at import
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), os.path.join(args.save, f"manager-w{worker}"),
                                             max_to_keep=1)
        manager.save()
        if worker == 0:  # the chief alone reads its model back, as a script evaluating it on rank 0 does
            keras.models.load_model(path)


def fit(model, **compile_options):
    model.compile(optimizer=compile_options.pop("optimizer", optimizer()), loss="mse", **compile_options)
    half = len(x) // 2
    model.fit(x, y, batch_size=batch, epochs=args.epochs, shuffle=False, verbose=0,
              validation_data=(x[:half], y[:half]), callbacks=callbacks())
    save_at_end(model)
    with open(os.path.join(args.out, f"iterations-w{worker}.txt"), "w") as f:
        f.write(f"{int(model.optimizer.iterations.numpy())}\n")  # the optimizer's applies (shared on a PS)
    return model.get_weights()


def with_train_step():
    class Stepped(keras.Model):
        def train_step(self, data):
            inputs, targets = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self(inputs, training=True) - targets))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}

    inputs = keras.Input((FEATURES,))
    return Stepped(inputs, keras.layers.Dense(1)(keras.layers.Dense(16, activation="tanh")(inputs)))


def gan():
    """Two optimizers in one train_step: the critic's step, then the generator's."""
    generator = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4, activation="tanh")])
    critic = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

    class Pair(keras.Model):
        def __init__(self):
            super().__init__()
            self.generator, self.critic = generator, critic
            self.c_opt, self.g_opt = keras.optimizers.Adam(1e-2), keras.optimizers.SGD(0.1)

        def call(self, inputs):
            return self.critic(self.generator(inputs))

        def train_step(self, data):
            inputs, targets = data
            with tf.GradientTape() as tape:
                c_loss = tf.reduce_mean(tf.square(self.critic(tf.stop_gradient(self.generator(inputs))) - targets))
            grads = tape.gradient(c_loss, self.critic.trainable_variables)
            self.c_opt.apply_gradients(zip(grads, self.critic.trainable_variables))
            with tf.GradientTape() as tape:
                g_loss = tf.reduce_mean(tf.square(self.critic(self.generator(inputs)) + targets))
            grads = tape.gradient(g_loss, self.generator.trainable_variables)
            self.g_opt.apply_gradients(zip(grads, self.generator.trainable_variables))
            return {"c_loss": c_loss, "g_loss": g_loss}

    model = Pair()
    model.compile()
    model.fit(x, y, batch_size=batch, epochs=args.epochs, shuffle=False, verbose=0, callbacks=[EpochMarks()])
    return generator.get_weights() + critic.get_weights()


def resumed(model, opt):
    """With --manager: the first epoch to run, after restoring the manager's latest checkpoint
    (weights, optimizer state, epoch), and a callable saving the next epoch's start."""
    if not args.manager:
        return 0, lambda epoch: None
    opt.build(model.trainable_variables)  # its slots exist before the restore fills them
    next_epoch = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=opt, epoch=next_epoch),
                                         args.manager, max_to_keep=2)
    manager.restore_or_initialize()

    def save(epoch):
        next_epoch.assign(epoch + 1)
        manager.save()

    return int(next_epoch.numpy()), save


def custom_loop(traced: bool):
    model = dense_stack()
    opt = optimizer()
    first, save = resumed(model, opt)

    def step(inputs, targets):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(inputs, training=True) - targets))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = tf.function(step) if traced else step
    for epoch in range(first, args.epochs):
        EpochMarks().on_epoch_begin(epoch)
        for k in range(len(x) // batch):
            step(tf.constant(x[k * batch:(k + 1) * batch]), tf.constant(y[k * batch:(k + 1) * batch]))
        save(epoch)
        EpochMarks().on_epoch_end(epoch)
    return model.get_weights()


def by_hand():
    """Updates its variable itself: no optimizer apply for adrun to synchronize."""
    w = tf.Variable(tf.zeros([FEATURES, 1]))
    for _ in range(args.epochs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.constant(x) @ w - y))
        w.assign_sub(0.1 * tape.gradient(loss, w))
    return [w.numpy()]


if args.kind == "train-step":
    weights = fit(with_train_step())
elif args.kind == "gan":
    weights = gan()
elif args.kind in ("loop-function", "loop-eager"):
    weights = custom_loop(traced=args.kind == "loop-function")
elif args.kind == "spe":
    weights = fit(dense_stack(), steps_per_execution=4)
elif args.kind == "by-hand":
    weights = by_hand()
else:
    weights = fit(dense_stack())
name = "reference" if args.reference else f"w{worker}"
np.savez(os.path.join(args.out, f"{name}.npz"), *weights)
print(f"{name}: trained {args.kind}, {len(weights)} arrays")
