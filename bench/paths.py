"""The repository's folders the benchmarks read and write, named once for every bench module.

The modules are run from the repository root as `python -m bench.NAME`, so `bench` is importable
and each finds the examples, the workloads and the results folder here rather than working the
root out from its own file.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"  # the reports (RESULTS-*.md) and this package
RESULTS_DIR = BENCH / "results"  # results as data: the JSON every benchmark writes, and plots
PLANS_DIR = RESULTS_DIR / "plans"  # the plans bench.cluster.run's runs used, plans/<results file's stem>/
WORKLOADS_DIR = BENCH / "workloads"  # the benchmark cluster's workload scripts
PEERS_DIR = BENCH / "peers"  # the hand-written TensorFlow peers adrun is measured against
EXAMPLES_DIR = REPO / "examples"  # the bundled examples the single-machine benchmarks start
