# Entry points that set everything up on a fresh machine:
#   make run    - create .venv, install the package alone, train the bundled example
#   make test   - create .venv, install with the test and mpi extras (matplotlib, PyTorch, MPI), run the tests
#   make bench  - create .venv, install with the bench extra (PyTorch), run the training benchmark
# Each target installs only what it needs; the stamp files record what is installed.
PYTHON ?= python3
# The PyTorch the cross-check tests install: the CPU build they were verified against.  An
# unpinned torch resolves to the newest build, here a 5.6 GB CUDA one that adds nothing to
# a CPU cross-check; override with e.g. make test TEST_TORCH=torch.
TEST_TORCH ?= torch==2.13.0
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,mpi]' '$(TEST_TORCH)'
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[bench]'
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/python convnet.py $(ARGS)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

bench: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_training.py
