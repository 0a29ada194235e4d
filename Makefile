# Entry points that set everything up on a fresh machine:
#   make run    - create .venv, install the package alone, train the bundled example
#   make test   - create .venv, install with the test, mpi and cuda-compile extras (matplotlib,
#                 PyTorch, MPI; CuPy and NVRTC to compile the CUDA kernels, no GPU needed), run the tests
#   make bench  - create .venv, install with the bench extra (PyTorch), run the training benchmark
#   make gpu-check - on a machine with an NVIDIA GPU: bench/gpu_check.sh with that machine's
#                 python (PYTHON), which must already have CuPy, PyTorch and pytest (the
#                 package itself is installed alone into it if missing); creates no venv.
#                 At most 6 minutes (GPU_CHECK_BUDGET=540: 9, more bench columns), a summary at the end (and summary.json); logs in
#                 GPU_CHECK_LOGS; STAGES reruns some stages, keeping the others' results.
# Each target installs only what it needs; the stamp files record what is installed.
PYTHON ?= python3
# The PyTorch the cross-check tests install: the CPU build they were verified against.  An
# unpinned torch resolves to the newest build, here a 5.6 GB CUDA one that adds nothing to
# a CPU cross-check; override with e.g. make test TEST_TORCH=torch.
TEST_TORCH ?= torch==2.13.0
VENV ?= .venv
GPU_CHECK_LOGS ?= gpu-check-logs
STAGES ?=
BIN := $(VENV)/bin

.PHONY: run test bench gpu-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,mpi,cuda-compile,onnx]' '$(TEST_TORCH)'
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[bench]'
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/python convnet.py $(ARGS)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 2

bench: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_training.py

gpu-check:
	PYTHON=$(PYTHON) bench/gpu_check.sh $(GPU_CHECK_LOGS) $(STAGES)
