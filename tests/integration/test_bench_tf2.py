"""The TF2 benchmark's pieces run as a user would run them: the Keras workloads (bench/workloads/keras_fit.py)
plainly and unchanged under adrun, the TF2 peers (bench/peers) as two workers on this machine.

Each writes the benchmark's result file (its timed steps, examples/s that agree with them); Keras 3
`fit` under MultiWorkerMirroredStrategy fails, and the test holds what it fails with, since the
benchmark reports it as data.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from adrun.launch.job.teardown import leftover_processes
from bench.paths import PEERS_DIR, WORKLOADS_DIR
from tests.support.bench_workloads import TINY, check_result_file, tiny_batch_size
from tests.support.adrun_cli import run_adrun
from tests.support.paths import REPO

pytestmark = [pytest.mark.integration, pytest.mark.full]  # the benchmark's pieces: make test-full

STEPS, WARMUP = 3, 1  # two timed steps
RUN_TIMEOUT_S = 300


def _keras_fit(model: str) -> list[str]:
    return [str(WORKLOADS_DIR / "keras_fit.py"), "--model", model, *TINY[model], "--steps", str(STEPS), "--warmup", str(WARMUP)]


@pytest.mark.parametrize("model", ["dense", "sparse", "ncf", "transformer"])
def test_keras_workload_plain_run_writes_its_timed_steps(tmp_path, model):
    proc = subprocess.run([sys.executable, *_keras_fit(model), "--result-file", str(tmp_path / "w{worker}.json")],
                          capture_output=True, text=True, cwd=REPO, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_result_file(tmp_path / "w0.json", f"{model}_keras", 0, STEPS - WARMUP, tiny_batch_size(model))


@pytest.mark.parametrize("model", ["dense", "transformer"])
def test_keras_workload_unchanged_under_adrun_every_worker_writes_its_timed_steps(tmp_path, spec_file, model):
    result = run_adrun("--spec", str(spec_file(workers=2, ps=0)), "--strategy", "AllReduce", "--quiet",
                       *_keras_fit(model), "--result-file", str(tmp_path / "w{worker}.json"))
    assert result.returncode == 0, result.output
    assert leftover_processes(result.job_id) == []
    for worker in (0, 1):
        check_result_file(tmp_path / f"w{worker}.json", f"{model}_keras", worker, STEPS - WARMUP, tiny_batch_size(model))


def _two_workers(tmp_path, peer: str, model: str) -> list[subprocess.CompletedProcess]:
    """The peer's two tasks started at once on loopback ports, both waited for."""
    sockets = [socket.socket() for _ in range(2)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    workers = ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in sockets)
    for s in sockets:
        s.close()
    argv = [sys.executable, str(PEERS_DIR / f"{peer}.py"), "--workload", f"{model}_keras", *TINY[model], "--steps", str(STEPS),
            "--warmup", str(WARMUP), "--result-file", str(tmp_path / "w{worker}.json"), "--worker-hosts", workers]
    procs = [subprocess.Popen([*argv, "--task-index", str(i)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, stdin=subprocess.DEVNULL) for i in (0, 1)]
    try:
        outputs = [p.communicate(timeout=RUN_TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return [subprocess.CompletedProcess(p.args, p.returncode, out) for p, out in zip(procs, outputs, strict=True)]


@pytest.mark.parametrize("peer,model", [("tf2_mwms_loop", "sparse"), ("tf2_mwms_loop", "transformer"),
                                        ("tf_keras_mwms_fit", "sparse"), ("tf_keras_mwms_fit", "ncf")])
def test_tf2_peer_two_workers_write_their_timed_steps(tmp_path, peer, model):
    done = _two_workers(tmp_path, peer, model)
    assert [d.returncode for d in done] == [0, 0], done[0].stdout[-3000:] + done[1].stdout[-3000:]
    for worker in (0, 1):  # each worker counts its own --batch-size a step (MWMS was given twice that)
        check_result_file(tmp_path / f"w{worker}.json", f"{model}_keras", worker, STEPS - WARMUP, tiny_batch_size(model))


def test_keras3_fit_under_mwms_fails_on_the_distributed_batch(tmp_path):
    """Keras 3's fit takes the strategy's per-replica batch for a tensor and stops before any step:
    the benchmark records this, so a Keras release that fixes it shows up here first."""
    done = _two_workers(tmp_path, "keras3_mwms_fit", "sparse")
    for d in done:
        assert d.returncode == 1
        assert "ValueError: Attempt to convert a value (PerReplica:{" in d.stdout
        assert "with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor" in d.stdout
    assert list(tmp_path.glob("w*.json")) == []
