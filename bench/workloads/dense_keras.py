"""Dense workload as a Keras 3 `model.fit` script: bench/workloads/dense.py's model, data and SGD in TF2 mode.

The same variables (two 3x3 conv blocks with 2x2 max pooling, the 12.6 MB fully connected layer,
the logits; Glorot kernels, zero biases), the same per-worker batches from the same pool and plain
SGD at the same learning rate, so under adrun the same gradient bytes cross the wire as for the
graph-mode script. Timing is a Keras callback: it starts at the end of the warm-up's last batch and
stops at the end of the last, the same steps and clocks as dense.py's, written as the same JSON:

    python bench/workloads/dense_keras.py --steps 200 --warmup 20 --batch-size 32 --result-file out/w{worker}.json
"""

import argparse
import os
import time

import keras

from harness import add_workload_arguments, input_dataset, parse_workload_args, write_result

parser = argparse.ArgumentParser(description=__doc__)
add_workload_arguments(parser, "dense")
args, model = parse_workload_args(parser, "dense")
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))


class StepTimer(keras.callbacks.Callback):
    """Wall and CPU seconds from the end of batch `warmup` - 1 (or the start of training) to the end."""

    def __init__(self, warmup: int) -> None:
        super().__init__()
        self.warmup = warmup
        self.start = self.cpu_start = 0.0
        self.seconds = self.cpu_seconds = 0.0

    def _begin(self) -> None:
        self.start, self.cpu_start = time.perf_counter(), time.process_time()

    def on_train_begin(self, logs=None) -> None:
        if self.warmup == 0:
            self._begin()

    def on_train_batch_end(self, batch, logs=None) -> None:  # logs are read: the step has run
        if batch == self.warmup - 1:
            self._begin()

    def on_train_end(self, logs=None) -> None:
        self.seconds, self.cpu_seconds = time.perf_counter() - self.start, time.process_time() - self.cpu_start


net = keras.Sequential([
    keras.Input((model.image, model.image, 3)),
    keras.layers.Conv2D(model.conv1, 3, padding="same", activation="relu", name="conv1"),
    keras.layers.MaxPooling2D(2),
    keras.layers.Conv2D(model.conv2, 3, padding="same", activation="relu", name="conv2"),
    keras.layers.MaxPooling2D(2),
    keras.layers.Flatten(),
    keras.layers.Dense(model.fc, activation="relu", name="fc"),
    keras.layers.Dense(model.classes, name="logits"),
])
net.compile(optimizer=keras.optimizers.SGD(args.lr),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
timer = StepTimer(args.warmup)
history = net.fit(input_dataset(model, args, worker), steps_per_epoch=args.steps, epochs=1, verbose=0, shuffle=False,
                  callbacks=[timer])
print(f"worker {worker}: {args.steps - args.warmup} timed steps in {timer.seconds:.3f} s, "
      f"loss {history.history['loss'][-1]:.4f}")

if args.result_file:
    write_result(args.result_file, "dense_keras", worker, args.steps - args.warmup, timer.seconds, args.batch_size,
                 timer.cpu_seconds)
