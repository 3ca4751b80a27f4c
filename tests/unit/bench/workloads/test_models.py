"""The benchmark models' sizes, data and flags (bench/workloads), without running any training."""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pytest

from tests.support.bench_workloads import load_workload_module, tiny_model

models = load_workload_module("models")


def _megabytes(model) -> float:
    return sum(4 * np.prod(spec.shape) for spec in model.variables()) / 1e6


def test_default_sizes_are_the_benchmarks():
    sparse = {spec.name: spec.shape for spec in models.Sparse().variables()}
    assert sparse["embedding"] == (200_000, 64)
    assert (sparse["hidden/kernel"], sparse["logits/kernel"]) == ((64, 256), (256, 1000))
    dense = models.Dense()
    fc = 4 * np.prod(next(s.shape for s in dense.variables() if s.name == "fc/kernel")) / 1e6
    assert 10 <= _megabytes(dense) <= 50
    assert fc > 0.9 * _megabytes(dense)  # one large fully connected layer dominates
    ncf = {spec.name: spec.shape for spec in models.NCF().variables()}
    assert ncf["user_embedding"] == (100_000, 32) and ncf["item_embedding"] == (20_000, 32)


def test_embed_is_sparse_dominant_a_million_rows_and_a_small_head():
    embed = models.Embed()
    shapes = {spec.name: spec.shape for spec in embed.variables()}
    assert shapes["embedding"] == (1_000_000, 32)
    head_mb = sum(4 * np.prod(shape) for name, shape in shapes.items() if name != "embedding") / 1e6
    assert 0.5 < head_mb < 2 and head_mb < 0.01 * _megabytes(embed)  # under 1 % of the parameters
    assert shapes["hidden2/kernel"] == (512, 512) and shapes["logit/kernel"] == (512, 1)


def test_embed_ids_are_uniform_so_every_shard_gets_its_share_of_rows():
    ids, label = models.worker_data(models.Embed(vocab=1000, bag=8), 0, 0, 256, 8)
    assert ids.shape == (2048, 8) and ids.min() >= 0 and ids.max() < 1000
    assert set(np.unique(label)) == {0.0, 1.0}
    quarters = np.bincount(ids.ravel() // 250, minlength=4) / ids.size
    assert np.all(np.abs(quarters - 0.25) < 0.03)  # a Zipf skew would put most ids in the first quarter


@pytest.mark.parametrize("name", ["sparse", "dense", "ncf", "embed"])
def test_data_is_fixed_by_seed_and_worker_and_differs_between_workers(name):
    model, batch = tiny_model(models, name)
    first = models.worker_data(model, 0, 0, batch, 3)
    again = models.worker_data(model, 0, 0, batch, 3)
    other = models.worker_data(model, 0, 1, batch, 3)
    assert all(len(array) == 3 * batch for array in first)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_sparse_ids_are_zipf_distributed_within_the_vocabulary():
    ids, label = models.worker_data(models.Sparse(vocab=1000, classes=7), 0, 0, 128, 8)
    assert ids.shape == (1024, 20) and ids.min() >= 0 and ids.max() < 1000
    assert label.min() >= 0 and label.max() < 7
    counts = np.bincount(ids.ravel(), minlength=1000)
    # P(k) ~ 1/(k+1)^1.1: id 0 about 2.1x id 1 and about 12.6x id 9 (loose bounds: sampling noise)
    assert 1.6 < counts[0] / counts[1] < 2.8
    assert 8 < counts[0] / counts[9] < 19


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.setitem(sys.modules, "models", models)  # what harness.py imports
    return load_workload_module("harness")


def test_warmup_not_below_steps_is_refused_naming_both_flags(capsys, harness):
    parser = argparse.ArgumentParser(prog="sparse.py")
    harness.add_workload_arguments(parser, "sparse")
    with pytest.raises(SystemExit) as exit_info:
        harness.parse_workload_args(parser, "sparse", ["--steps", "5", "--warmup", "5"])
    assert exit_info.value.code == 2
    assert "--warmup must be in [0, --steps): got --warmup 5 --steps 5" in capsys.readouterr().err
    args, model = harness.parse_workload_args(parser, "sparse", ["--vocab", "30", "--steps", "5", "--warmup", "0"])
    assert (model.vocab, model.dim, args.batch_size) == (30, 64, 128)


def test_an_image_size_the_poolings_cannot_halve_twice_is_refused(capsys, harness):
    parser = argparse.ArgumentParser(prog="dense.py")
    harness.add_workload_arguments(parser, "dense")
    with pytest.raises(SystemExit) as exit_info:
        harness.parse_workload_args(parser, "dense", ["--image", "10"])
    assert exit_info.value.code == 2
    assert "--image must be a positive multiple of 4 (two 2x2 poolings): got 10" in capsys.readouterr().err
