#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU, in four stages, each under its own limit:
#   1. environment   what the GPU, driver, CuPy, NVRTC, NCCL and PyTorch are
#   2. smoke         one minute of the quickest CUDA tests, stopping at the first failure
#   3. tests         the CUDA tests, each under a timeout that dumps all thread stacks
#   4. bench         bench/bench_cuda.py: images/s against PyTorch on the same GPU
# Usage: bench/gpu_check.sh [LOG_DIR] [STAGE ...]   (make gpu-check; stages default to all)
# TESTS_LIMIT and BENCH_LIMIT (seconds, default 540 each) shorten the two long stages.
# PYTHON (default python3) must import the package (on a GPU image that has CuPy and
# pytest-timeout: pip install --no-deps --no-build-isolation --no-index -e .; elsewhere
# pip install -e '.[gpu,test,cuda-compile]' pytest-timeout).  Without a GPU, environment
# says why and fails, smoke and bench are skipped, and tests runs what needs no GPU.
# Exit status: the first failed stage's (2 where a stage needs the GPU it lacks), else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=${1:-gpu-check-logs}
shift || true
STAGES=${*:-environment smoke tests bench}
for stage in $STAGES; do
    case $stage in
    environment | smoke | tests | bench) ;;
    *) echo "gpu_check: unknown stage '$stage' (environment, smoke, tests, bench)" >&2
       exit 2 ;;
    esac
done
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
status=0

run_stage() {  # name limit_seconds command...
    local name=$1 limit=$2
    shift 2
    echo "=== $name (at most ${limit} s): $*"
    local start=$SECONDS
    timeout --signal=INT --kill-after=30 "$limit" "$@" 2>&1 | tee "$LOG/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
    return "$rc"
}

fail_stage() {  # name exit_status message: a stage that cannot start
    echo "=== $1: $3" | tee "$LOG/$1.log" >&2
    [ "$status" -eq 0 ] && status=$2
    return "$2"
}

# Preconditions, each checked once: the package imports, pytest-timeout is there, a GPU is.
if ! "$PY" -c "import convnet.kernels.cuda" 2>"$LOG/import.err"; then
    echo "gpu_check: $PY cannot import the package (pip install --no-deps" \
         "--no-build-isolation --no-index -e . on a GPU image): $(tail -n 1 "$LOG/import.err")" >&2
    exit 3
fi
NO_GPU=$("$PY" -W ignore -c "from convnet.kernels import cuda; print(cuda.unavailable_reason())" \
         2>/dev/null) || NO_GPU="the CUDA backend's availability check failed"
NO_TIMEOUT=
"$PY" -c "import pytest_timeout" 2>/dev/null \
    || NO_TIMEOUT="pytest-timeout is not installed for $PY (pip install pytest-timeout)"

PYTEST=("$PY" -m pytest -p no:cacheprovider -o addopts= -q -rfEs
        --timeout-method=thread)
# Every CUDA test but the host emulation (tests/cuda/test_layers_emulated.py: minutes of
# g++ compiles that say nothing about the GPU; make test runs it): those on the GPU, and
# those on this machine's CuPy and compilers (the sources, the nvcc and NVRTC compiles,
# the layer catalogue, dispatch, the benchmark's exit without a GPU).
CUDA_TESTS=(tests/cuda/test_gpu.py tests/runtime/devices/test_collectives.py tests/cuda/test_async.py
            tests/cuda/test_device.py tests/bench/test_bench_cuda.py tests/cuda/test_sources.py
            tests/cuda/test_nvrtc.py tests/cuda/test_layer_cases.py tests/kernels/test_dispatch.py)

for stage in $STAGES; do
    case $stage in
    environment)
        run_stage environment 60 "$PY" -m convnet.kernels.cuda.environment ;;
    smoke)
        if [ -n "$NO_GPU" ]; then fail_stage smoke 2 "skipped: $NO_GPU"; continue; fi
        if [ -n "$NO_TIMEOUT" ]; then fail_stage smoke 3 "cannot run: $NO_TIMEOUT"; break; fi
        run_stage smoke 60 "${PYTEST[@]}" -x --timeout=30 tests/cuda/test_gpu.py \
            -k "dropout_uniforms or bitwise_numpys or xp_allocates or conv-groups2 or imagenet-1gpu" \
            || break ;;
    tests)
        if [ -n "$NO_TIMEOUT" ]; then fail_stage tests 3 "cannot run: $NO_TIMEOUT"; continue; fi
        [ -n "$NO_GPU" ] && echo "=== tests: without a GPU ($NO_GPU): the GPU tests skip"
        run_stage tests "${TESTS_LIMIT:-540}" "${PYTEST[@]}" --timeout=120 --durations=15 \
            --junitxml="$LOG/tests.xml" "${CUDA_TESTS[@]}" ;;
    bench)
        if [ -n "$NO_GPU" ]; then fail_stage bench 2 "skipped: $NO_GPU"; continue; fi
        run_stage bench "${BENCH_LIMIT:-540}" "$PY" bench/bench_cuda.py --json "$LOG/bench.json" ;;
    esac
done
exit "$status"
