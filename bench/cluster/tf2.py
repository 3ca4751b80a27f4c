"""The TF2 benchmark's names: the Keras workloads, their graph-mode twins and the TF2 peers.

A Keras workload `<model>_keras` is bench/workloads/keras_fit.py run with `--model <model>`; where a
graph-mode script trains the same model (dense, sparse, ncf), that script is its twin, run under
adrun with the same plan to compare adrun's two modes.
"""

from __future__ import annotations

KERAS_SUFFIX = "_keras"
KERAS_SCRIPT = "keras_fit.py"
TF2_WORKLOADS = ("dense_keras", "sparse_keras", "ncf_keras", "transformer_keras")
GRAPH_TWINS = {"dense_keras": "dense", "sparse_keras": "sparse", "ncf_keras": "ncf"}
# TF2 peers, written as a TF2 user would without adrun (bench/peers/README.md); keras3_mwms_fit is run
# to record how Keras 3 fit fails under MultiWorkerMirroredStrategy
PEER_TF2_LOOP = "tf2_mwms_loop"
PEER_TF_KERAS_FIT = "tf_keras_mwms_fit"
PEER_KERAS3_FIT = "keras3_mwms_fit"
TF2_PEERS = (PEER_TF2_LOOP, PEER_TF_KERAS_FIT, PEER_KERAS3_FIT)


def keras_model(workload: str) -> str | None:
    """The model of a Keras workload (`sparse_keras` -> `sparse`); None for a graph-mode script."""
    return workload[:-len(KERAS_SUFFIX)] if workload in TF2_WORKLOADS else None


def script_args(workload: str) -> list[str]:
    """The workload's script file name in bench/workloads and the flags that pick its model."""
    model = keras_model(workload)
    return [KERAS_SCRIPT, "--model", model] if model else [f"{workload}.py"]
