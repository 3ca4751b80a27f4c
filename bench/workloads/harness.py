"""What the workload scripts and the peers share around a model: its flags, its input pipeline and
the result file, so every contender is measured with the same batch, steps and JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import tensorflow as tf

from models import WORKLOADS, worker_data


def add_workload_arguments(parser: argparse.ArgumentParser, name: str, registry: dict[str, type] = WORKLOADS) -> None:
    """The common run flags and one flag per size field of the model `registry[name]` (e.g. --vocab, --dim)."""
    model = registry[name]
    parser.add_argument("--steps", type=int, default=200, help="steps in all, warm-up included")
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out of the timing")
    parser.add_argument("--batch-size", type=int, default=model.default_batch_size, help="examples per step per worker")
    parser.add_argument("--lr", type=float, default=model.learning_rate)
    parser.add_argument("--seed", type=int, default=0, help="data seed; each worker also mixes in its index")
    parser.add_argument("--result-file", help="write the timing JSON here; {worker} is replaced by the worker index")
    for field in dataclasses.fields(model):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)


def parse_workload_args(parser: argparse.ArgumentParser, name: str, argv: list[str] | None = None,
                        registry: dict[str, type] = WORKLOADS):
    """Parse the flags and build the sized model `registry[name]`; a warm-up not below the steps is refused."""
    args = parser.parse_args(argv)
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup must be in [0, --steps): got --warmup {args.warmup} --steps {args.steps}")
    model_class = registry[name]
    sizes = {field.name: getattr(args, field.name) for field in dataclasses.fields(model_class)}
    try:
        return args, model_class(**sizes)
    except ValueError as error:
        parser.error(str(error))


def input_dataset(model, args, worker: int) -> tf.data.Dataset:
    """This worker's batches from memory, repeated forever."""
    arrays = worker_data(model, args.seed, worker, args.batch_size)
    return tf.data.Dataset.from_tensor_slices(arrays).batch(args.batch_size, drop_remainder=True).repeat()


def write_result(template: str, workload: str, worker: int, steps: int, seconds: float, batch_size: int,
                 cpu_seconds: float) -> Path:
    """The benchmark's result JSON for this worker's `steps` timed steps; `cpu_seconds` is the
    process's CPU time over them, all threads (bench/hook_overhead.py compares it: on a shared
    machine it is steadier than the wall clock)."""
    path = Path(template.replace("{worker}", str(worker)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "workload": workload, "worker": worker, "steps": steps, "seconds": seconds, "batch_size": batch_size,
        "examples_per_s": steps * batch_size / seconds, "steps_per_s": steps / seconds, "cpu_seconds": cpu_seconds,
    }) + "\n")
    return path
