"""The benchmark's Keras 3 workloads: one model (`--model dense|sparse|ncf|transformer`) trained by `model.fit`.

An ordinary single-machine Keras 3 script (TF2 mode under adrun): the model of
bench/workloads/keras_models.py, plain SGD, this worker's batches from memory. dense, sparse and ncf
have the graph-mode scripts' variables, initializers, batches and learning rate, so under adrun the
same gradient bytes cross the wire in both modes. A Keras callback times the steps after the
warm-up (the graph-mode scripts' steps and clocks) and writes the same result JSON, named
`<model>_keras`:

    python bench/workloads/keras_fit.py --model sparse --steps 200 --warmup 20 --result-file out/w{worker}.json
"""

import argparse
import os

import keras

from harness import add_workload_arguments, parse_workload_args, write_result
from keras_models import SIZES, build, dataset, loss, step_timer, workload_name

first = argparse.ArgumentParser(add_help=False)
first.add_argument("--model", choices=sorted(SIZES), required=True)
chosen = first.parse_known_args()[0].model  # it decides which size flags exist
parser = argparse.ArgumentParser(description=__doc__, parents=[first])
add_workload_arguments(parser, chosen, SIZES)
args, sizes = parse_workload_args(parser, chosen, registry=SIZES)
worker = int(os.environ.get("ADRUN_WORKER_INDEX", "0"))

net = build(keras, sizes)
net.compile(optimizer=keras.optimizers.SGD(args.lr), loss=loss(keras, sizes))
timer = step_timer(keras, args.warmup)
history = net.fit(dataset(sizes, args.seed, worker, args.batch_size), steps_per_epoch=args.steps, epochs=1, verbose=0, shuffle=False,
                  callbacks=[timer])
print(f"worker {worker}: {args.steps - args.warmup} timed steps in {timer.seconds:.3f} s, "
      f"loss {history.history['loss'][-1]:.4f}")

if args.result_file:
    write_result(args.result_file, workload_name(chosen), worker, args.steps - args.warmup, timer.seconds,
                 args.batch_size, timer.cpu_seconds)
