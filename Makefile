# Two entry points that set everything up on a fresh machine:
#   make run   - create .venv, install, train the bundled example (python convnet.py)
#   make test  - create .venv, install with test extras, run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test bench

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test,bench,mpi]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/python convnet.py $(ARGS)

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q

bench: $(BIN)/.installed
	$(BIN)/python bench/bench_training.py
