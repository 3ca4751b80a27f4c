# Two commands do everything on a fresh machine:
#   make demo   set up .venv, install adrun, run an example on this machine as a local cluster
#   make test   set up .venv with the test extras and run the test suite (~15 min on 2 cores)
# make test-full runs the long matrix as well; make bench measures strategies (bench/RESULTS.md).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.adrun-installed

.PHONY: demo test test-full bench clean

$(STAMP): setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,keras2]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/adrun examples/linear_regression.py --steps 300

test: $(STAMP)
	./tests/cluster/install-deps.sh
	$(BIN)/python -m pytest -q -m "not full" tests

test-full: $(STAMP)
	./tests/cluster/install-deps.sh
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python bench/strategies.py

clean:
	rm -rf $(VENV) build *.egg-info
