#!/usr/bin/env bash
# The GPU speed work on a machine with an NVIDIA GPU, in three stages, each under its limit:
#   1. environment  what the GPU, driver, CuPy, cuDNN and PyTorch are
#   2. proofs       tests/cuda/test_gpu_speed.py: one host wait per step; cuDNN against the
#                   im2col kernels and the walks bitwise equal with it; captured steps
#                   bitwise eager ones; every --precision trains (about a minute)
#   3. bench        bench/bench_cuda.py --switches: both nets, every column of
#                   docs/BENCHMARKS.md's GPU table, memory, the hybrid on one GPU
# Usage: bench/gpu_speed_check.sh [LOG_DIR] [STAGE ...]   (stages default to all three)
# PROOFS_LIMIT and BENCH_LIMIT (seconds, default 240 and 420) bound the long stages, so the
# whole check fits in about twelve minutes.  PYTHON (default python3) must import the
# package with the gpu extra (CuPy, the cuDNN frontend and library, ml_dtypes) and pytest.
# The switches CONVNET_CUDNN and CONVNET_CUDA_GRAPH stay off by default until stages 2 and
# 3 show them right and faster (docs/CUDA.md says how to switch them on).
# Exit status: the first failed stage's (2 where there is no GPU), else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=${1:-gpu-speed-logs}
shift || true
STAGES=${*:-environment proofs bench}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
status=0

run_stage() {  # name limit_seconds command...
    local name=$1 limit=$2
    shift 2
    echo "=== $name (at most ${limit} s): $*"
    local start=$SECONDS
    timeout --signal=INT --kill-after=20 "$limit" "$@" 2>&1 | tee "$LOG/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
    return 0
}

NO_GPU=$("$PY" -W ignore -c "from convnet.kernels import cuda; print(cuda.unavailable_reason())" \
         2>/dev/null) || NO_GPU="the package does not import for $PY"
for stage in $STAGES; do
    case $stage in
    environment)
        run_stage environment 60 "$PY" -m convnet.kernels.cuda.environment ;;
    proofs)
        if [ -n "$NO_GPU" ]; then echo "=== proofs: skipped: $NO_GPU"; status=2; continue; fi
        run_stage proofs "${PROOFS_LIMIT:-240}" "$PY" -m pytest -p no:cacheprovider -o addopts= \
            -q -rfEs --durations=10 --junitxml="$LOG/proofs.xml" tests/cuda/test_gpu_speed.py ;;
    bench)
        if [ -n "$NO_GPU" ]; then echo "=== bench: skipped: $NO_GPU"; status=2; continue; fi
        run_stage bench "${BENCH_LIMIT:-420}" "$PY" bench/bench_cuda.py --switches \
            --json "$LOG/bench.json" ;;
    *)
        echo "gpu_speed_check: unknown stage '$stage' (environment, proofs, bench)" >&2
        exit 2 ;;
    esac
done
exit "$status"
