"""The hand-written TF peers (bench/peers) do the same mathematics as adrun's synchronous training.

The averaging oracle (docs/testing.md): two workers with different batches train one step; every
worker's variables must equal, computed here in one process from the chief's initial values, the
SGD step on the mean of the two workers' gradients. A peer that did not synchronize, or that let
one worker's gradient fill the update, fails it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bench.paths import PEERS_DIR
from tests.support.bench_workloads import TINY, check_result_file, load_workload_module, tiny_batch_size, tiny_model
from tests.support.paths import REPO
from tests.support.ports import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.full]  # the benchmark's pieces: make test-full

tf1 = tf.compat.v1
models = load_workload_module("models")
LR = 0.5
RUN_TIMEOUT_S = 300


def _run_tasks(commands: list[list[str]], logs: Path) -> None:
    """Start every task at once (as on separate hosts) and wait for all; the first failure ends the
    others at once (a PS would wait for its workers forever); none may fail or be left running."""
    outputs = [logs / f"task{i}.log" for i in range(len(commands))]
    handles = [output.open("w") for output in outputs]
    procs = [subprocess.Popen([sys.executable, *command], cwd=REPO, stdout=handle, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL) for command, handle in zip(commands, handles)]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while None in (codes := [p.poll() for p in procs]) and not any(codes):
            assert time.monotonic() < deadline, f"tasks still running after {RUN_TIMEOUT_S} s"
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for handle in handles:
            handle.close()
    failed = sorted((proc.returncode == -signal.SIGKILL, " ".join(command), proc.returncode, output)
                    for command, proc, output in zip(commands, procs, outputs) if proc.returncode)
    if failed:  # the task that failed by itself first, not one killed here because of it
        _, command, code, output = failed[0]
        pytest.fail(f"{command} exited {code}:\n{output.read_text()[-3000:]}")


def _worker_gradients(name: str, init: dict[str, np.ndarray]) -> tuple[list[dict], list[np.ndarray]]:
    """Each worker's gradient on its first batch at `init` (sparse ones densified), and its inputs."""
    model, batch_size = tiny_model(models, name)
    gradients, batches = [], []
    with tf.Graph().as_default(), tf1.Session() as sess:
        params = {key: tf.constant(value) for key, value in init.items()}
        for worker in (0, 1):
            batch = tuple(array[:batch_size] for array in models.worker_data(model, 0, worker, batch_size))
            loss = tf.reduce_mean(model.per_example_loss(params, tuple(tf.constant(a) for a in batch)))
            grads = tf.gradients(loss, list(params.values()))
            gradients.append(dict(zip(params, sess.run([tf.convert_to_tensor(g) for g in grads]))))
            batches.append(batch)
    return gradients, batches


def _train_one_step(tmp_path: Path, peer: str, name: str) -> list[np.lib.npyio.NpzFile]:
    args = [str(PEERS_DIR / peer), "--workload", name, *TINY[name], "--steps", "1", "--warmup", "0",
            "--lr", str(LR), "--dump-variables", str(tmp_path / "w{worker}.npz"),
            "--result-file", str(tmp_path / "w{worker}.json")]
    ports = free_ports(3)
    workers = f"localhost:{ports[1]},localhost:{ports[2]}"
    if peer == "tf_ps.py":
        cluster_args = ["--ps-hosts", f"localhost:{ports[0]}", "--worker-hosts", workers]
        tasks = [[*args, *cluster_args, "--job-name", "ps", "--task-index", "0"]]
        tasks += [[*args, *cluster_args, "--job-name", "worker", "--task-index", str(w)] for w in (0, 1)]
    else:
        tasks = [[*args, "--worker-hosts", workers, "--task-index", str(w)] for w in (0, 1)]
    _run_tasks(tasks, tmp_path)
    for worker in (0, 1):
        check_result_file(tmp_path / f"w{worker}.json", name, worker, 1, tiny_batch_size(name))
    return [np.load(tmp_path / f"w{worker}.npz") for worker in (0, 1)]


def _initial(dump) -> dict[str, np.ndarray]:
    return {key[len("init/"):]: dump[key] for key in dump.files if key.startswith("init/")}


def _assert_final(dumps, expected: dict[str, np.ndarray], what: str) -> None:
    for worker, dump in enumerate(dumps):
        for key, value in expected.items():
            np.testing.assert_allclose(dump[f"final/{key}"], value, rtol=1e-5, atol=1e-6, err_msg=f"w{worker}: {key} ({what})")


@pytest.mark.parametrize("name", [pytest.param("sparse", marks=pytest.mark.full), pytest.param("ncf", marks=pytest.mark.full),
                                  pytest.param("dense", marks=pytest.mark.full)])
def test_mwms_step_is_the_mean_gradient_step(tmp_path, name):
    dumps = _train_one_step(tmp_path, "tf_mwms.py", name)
    init = _initial(dumps[0])
    (g0, g1), _ = _worker_gradients(name, init)
    _assert_final(dumps, {key: init[key] - LR * (g0[key] + g1[key]) / 2 for key in init}, "mean gradient")
    assert int(dumps[0]["global_step"]) == 1
    chief_alone = {key: init[key] - LR * g0[key] for key in init}
    assert any(not np.allclose(dumps[0][f"final/{k}"], v, rtol=1e-5, atol=1e-6) for k, v in chief_alone.items())


@pytest.mark.full
def test_tf_ps_step_on_a_dense_model_is_the_mean_gradient_step(tmp_path):
    dumps = _train_one_step(tmp_path, "tf_ps.py", "dense")
    init = _initial(dumps[0])
    (g0, g1), _ = _worker_gradients("dense", init)
    _assert_final(dumps, {key: init[key] - LR * (g0[key] + g1[key]) / 2 for key in init}, "mean gradient")


def test_tf_ps_step_is_the_mean_gradient_step_except_for_embedding_rows_one_worker_touched(tmp_path):
    """SyncReplicasOptimizer averages dense gradients over the workers, but aggregates IndexedSlices
    in a SparseConditionalAccumulator, which divides by how many gradients held a row (and merges
    unsorted, repeated indices without matching them up): a row one worker touched gets that
    worker's whole gradient, not half of it as in data-parallel SGD (bench/peers/README.md). What
    the workers send is the same as in the data-parallel step, so the benchmark's bytes compare."""
    dumps = _train_one_step(tmp_path, "tf_ps.py", "sparse")
    init = _initial(dumps[0])
    (g0, g1), batches = _worker_gradients("sparse", init)
    _assert_final(dumps, {key: init[key] - LR * (g0[key] + g1[key]) / 2 for key in init if key != "embedding"},
                  "mean gradient")
    assert all(int(dump["global_step"]) == 1 for dump in dumps)
    vocab = init["embedding"].shape[0]
    touched = [np.isin(np.arange(vocab), batch[0]) for batch in batches]
    only = [touched[0] & ~touched[1], touched[1] & ~touched[0]]
    assert only[0].any() and only[1].any()  # the data exercise the case
    whole_gradient = init["embedding"] - LR * (g0["embedding"] + g1["embedding"])
    untouched = ~(touched[0] | touched[1])
    for worker, dump in enumerate(dumps):
        final = dump["final/embedding"]
        for rows in only:
            np.testing.assert_allclose(final[rows], whole_gradient[rows], rtol=1e-5, atol=1e-6, err_msg=f"w{worker}")
        np.testing.assert_array_equal(final[untouched], init["embedding"][untouched])
