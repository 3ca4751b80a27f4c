"""Peer: Keras 3 `model.fit` under MultiWorkerMirroredStrategy, written by hand without adrun.

tf_keras_mwms_fit.py's script with Keras 3 (bench/peers/mwms_fit.py has the body). The benchmark
runs it to record what happens: Keras 3's `fit` does not support MultiWorkerMirroredStrategy
(bench/RESULTS-cluster-tf2.md quotes the failure), so its runs are data about the failure, not speed:

    python bench/peers/keras3_mwms_fit.py --workload dense_keras --worker-hosts h1:2222,h2:2222 --task-index 0 \\
        --steps 200 --warmup 20 --result-file out/w{worker}.json
"""

import keras

from mwms_fit import fit_under_mwms

if __name__ == "__main__":
    fit_under_mwms(keras, __doc__.splitlines()[0])
