#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU, in four stages, each under its own limit:
#   1. environment   what the GPU, driver, CuPy, NVRTC, NCCL and PyTorch are
#   2. smoke         one minute of the quickest CUDA tests, stopping at the first failure
#   3. tests         every CUDA test, each under a timeout that dumps all thread stacks
#   4. bench         bench/bench_cuda.py: images/s against PyTorch on the same GPU
# Usage: bench/gpu_check.sh [LOG_DIR] [STAGE ...]   (make gpu-check; stages default to all)
# TESTS_LIMIT and BENCH_LIMIT (seconds, default 540 each) shorten the two long stages.
# The package must be importable (pip install -e '.[gpu,test]', or an image that has
# CuPy and pytest-timeout).  Exit status: the first failed stage's, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=${1:-gpu-check-logs}
shift || true
STAGES=${*:-environment smoke tests bench}
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

PYTEST=("$PY" -m pytest -p no:cacheprovider -o addopts= -q -rfEs
        --timeout-method=thread)
CUDA_TESTS=(tests/cuda/test_gpu.py tests/runtime/devices/test_collectives.py
            tests/cuda/test_async.py tests/cuda/test_device.py tests/bench/test_bench_cuda.py
            tests/cuda/test_sources.py tests/kernels/test_dispatch.py)

for stage in $STAGES; do
    case $stage in
    environment)
        run_stage environment 60 "$PY" -m convnet.kernels.cuda.environment ;;
    smoke)
        run_stage smoke 60 "${PYTEST[@]}" -x --timeout=30 tests/cuda/test_gpu.py \
            -k "dropout_uniforms or bitwise_numpys or xp_allocates or conv-groups2 or imagenet-1gpu" \
            || break ;;
    tests)
        run_stage tests "${TESTS_LIMIT:-540}" "${PYTEST[@]}" --timeout=120 --durations=15 \
            --junitxml="$LOG/tests.xml" "${CUDA_TESTS[@]}" ;;
    bench)
        run_stage bench "${BENCH_LIMIT:-540}" "$PY" bench/bench_cuda.py --json "$LOG/bench.json" ;;
    *)
        echo "gpu_check: unknown stage '$stage' (environment, smoke, tests, bench)" >&2
        exit 2 ;;
    esac
done
exit "$status"
