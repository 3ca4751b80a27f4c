# Two commands do everything on a fresh machine:
#   make demo   set up .venv, install adrun, run an example on this machine as a local cluster
#   make test   set up .venv with the test extras, lint, and run the test suite (time: README.md, "Quick start")
# make lint runs ruff (ruff.toml) and mypy (setup.cfg [mypy], through tools/typecheck.py) on adrun/, launch/, strategies/.
# make test-full runs the long matrix as well; make bench measures strategies (bench/RESULTS.md);
# make bench-cluster(-quick) runs adrun against TF peers on namespace hosts, as root (bench/RESULTS-cluster.md):
# bench-cluster is 132 runs, about 2 hours on the shared 2-core machine (it prints its estimate first);
# bench-cluster-quick is 24 runs, about 15 minutes, reported in bench/RESULTS-cluster-quick.md (the full report stays).
# make bench-cluster-tf2(-quick) runs the TF2 benchmark: Keras workloads under adrun's TF2 mode against the TF2 peers
# (bench/RESULTS-cluster-tf2.md); the full one is every Keras workload on both links at 2 and 4 hosts (hours),
# the quick one the sparse Keras workload, commodity link, 2 hosts (12 runs, about 10 minutes).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.adrun-installed
BENCH_STAMP := $(VENV)/.adrun-bench-installed
# The suite on TEST_WORKERS pytest-xdist workers (docs/testing.md, "Running in parallel"): its tests
# mostly wait (TF start-up, gRPC, events): a second worker's tests use the time the first one's wait;
# more would start more TF processes than 2 cores run without slowing each other. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

.PHONY: demo lint test test-full bench bench-cluster bench-cluster-quick bench-cluster-tf2 bench-cluster-tf2-quick clean

$(STAMP): setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,keras2]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/adrun examples/linear_regression.py --steps 300

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/python tools/typecheck.py

test: $(STAMP) lint
	./tests/cluster/install-deps.sh
	$(PYTEST) -m "not full" tests

test-full: $(STAMP)
	./tests/cluster/install-deps.sh
	$(PYTEST) tests

bench: $(STAMP)
	$(BIN)/python -m bench.strategies

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[test,keras2,bench]"
	touch $(BENCH_STAMP)

bench-cluster: $(BENCH_STAMP)
	./tests/cluster/install-deps.sh
	$(BIN)/python -m bench.cluster.run

bench-cluster-quick: $(BENCH_STAMP)
	./tests/cluster/install-deps.sh
	$(BIN)/python -m bench.cluster.run --quick

bench-cluster-tf2: $(BENCH_STAMP)
	./tests/cluster/install-deps.sh
	$(BIN)/python -m bench.cluster.run --tf2 --variants

bench-cluster-tf2-quick: $(BENCH_STAMP)
	./tests/cluster/install-deps.sh
	$(BIN)/python -m bench.cluster.run --tf2 --workloads sparse_keras --profiles commodity --hosts 2 --builders AllReduce \
		--peers tf2_mwms_loop,tf_keras_mwms_fit --out bench/results/cluster-tf2-quick.json \
		--markdown bench/RESULTS-cluster-tf2.md

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
